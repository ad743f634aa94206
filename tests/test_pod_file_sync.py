"""A sandbox pod sees the thread's files in S3, and what it writes survives it: the worker syncs the pod's
``/mnt/user-data`` through the sandbox server around every tool call. kmock's emulator with the test kubelet
(each pod a real sandbox-server process), SeaweedFS as S3, the session's real Temporal dev server."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from langchain_core.messages import ToolMessage
from temporalio.client import Client

from activities.sandbox.kubernetes import KubernetesSandboxProvider
from activities.sandbox.kubernetes_settings import KubernetesSandboxSettings
from activities.sandbox.remote import SYNC_CHUNK_BYTES
from activities.storage.s3 import S3ObjectStore
from activities.thread_files import ThreadFiles
from activities.tool_output import ToolOutputActivities
from activities.tools import ToolActivities
from tests.support import start_run
from tests.support.kube import REPO, Cluster
from vocabulary.contracts import ExternalizeInput, SandboxReleaseInput, ThreadRef, ToolCallInput
from workers.config import HartflowConfig
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, unique, write_script
from workers.testing.s3 import S3Server
from workers.worker import thread_store
from workflows.run import ReplyInput, RunView

UD = "/mnt/user-data"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster.running(tmp_path / "kubelet") as running:
        yield running


def _config(cluster: Cluster, home: Path, address: str, s3_storage: dict[str, Any]) -> HartflowConfig:
    return make_config(home, address, sandbox=cluster.sandbox_settings(), storage=s3_storage)


def _files(config: HartflowConfig) -> ThreadFiles:
    return ThreadFiles(S3ObjectStore(config.storage.s3), config.home, exclude=frozenset(config.storage.sync_exclude))


def _tools(cluster: Cluster, files: ThreadFiles, *, bash_timeout: float = 30) -> ToolActivities:
    settings = KubernetesSandboxSettings.model_validate(cluster.sandbox_settings()["kubernetes"])
    return ToolActivities(KubernetesSandboxProvider(settings, bash_timeout=bash_timeout), files=files)


async def _bash(tools: ToolActivities, thread: ThreadRef, command: str) -> str:
    output = await tools.execute(ToolCallInput(thread, tool_call("bash", command=command)))
    return output.content


def _stored(files: ThreadFiles, thread: ThreadRef) -> list[str]:
    prefix = files.prefix(thread)
    return sorted(info.key[len(prefix) :] for info in files.store.list(prefix))


def _cli(config: HartflowConfig, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    settings = config.model_dump(mode="json")
    settings["storage"]["s3"]["secret_access_key"] = config.storage.s3.secret_access_key.get_secret_value()
    config_file = tmp_path / "hartflow.yaml"
    config_file.write_text(yaml.safe_dump(settings), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARTFLOW_")}
    return subprocess.run(
        [sys.executable, "-m", "workers.cli", *args, "--config", str(config_file)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def _tool_outputs(config: HartflowConfig, thread_id: str) -> list[str]:
    snapshot = await asyncio.to_thread(thread_store(config).load, ThreadRef(config.user_id, thread_id))
    return [str(m.content) for m in snapshot.state.messages if isinstance(m, ToolMessage)]


# -- real runs -------------------------------------------------------------------------------------------------


async def test_an_upload_reaches_bash_in_the_pod_and_what_bash_leaves_reaches_the_bucket(
    client: Client, tmp_path: Path, temporal_address: str, cluster: Cluster, s3_storage: dict[str, Any]
) -> None:
    config = _config(cluster, tmp_path / "home", temporal_address, s3_storage)
    thread = ThreadRef(config.user_id, unique("thread"))
    (tmp_path / "notes.txt").write_text("uploaded body\n")
    uploaded = _cli(config, tmp_path, "upload", thread.thread_id, str(tmp_path / "notes.txt"))
    assert uploaded.returncode == 0, uploaded.stderr
    command = f"cat {UD}/uploads/notes.txt; echo result > {UD}/outputs/out.txt; rm {UD}/uploads/notes.txt"
    model = write_script(tmp_path, [calls(tool_call("bash", command=command)), answer("done")])
    async with running_worker(client, config):
        view = await settle(await start_run(client, config, "work", model=model, thread_id=thread.thread_id))
    assert view.status == "completed"
    assert await _tool_outputs(config, thread.thread_id) == ["uploaded body\n"]
    assert not cluster.names("pods")  # the run released its pod: the output lives on in the bucket only
    files = _files(config)
    assert _stored(files, thread) == ["outputs/out.txt"]
    assert files.read(thread, f"{UD}/outputs/out.txt") == b"result\n"
    state = _cli(config, tmp_path, "state", thread.thread_id, "--json")
    assert state.returncode == 0, state.stderr
    assert json.loads(state.stdout)["outputs"] == [{"path": f"{UD}/outputs/out.txt", "size": len(b"result\n")}]
    shown = _cli(config, tmp_path, "state", thread.thread_id)
    assert f"{UD}/outputs/out.txt (7 bytes)" in shown.stdout


async def test_another_worker_with_another_home_continues_the_run_in_a_new_pod_with_the_same_files(
    client: Client, tmp_path: Path, temporal_address: str, cluster: Cluster, s3_storage: dict[str, Any]
) -> None:
    config_a = _config(cluster, tmp_path / "a", temporal_address, s3_storage)
    config_b = config_a.model_copy(update={"storage": config_a.storage.model_copy(update={"home": tmp_path / "b"})})
    thread = ThreadRef(config_a.user_id, unique("thread"))
    script = [
        calls(tool_call("bash", "b1", command=f"echo from A > {UD}/outputs/a.txt; echo tmp > {UD}/workspace/t")),
        calls(tool_call("bash", "b2", command=f"rm {UD}/workspace/t")),
        calls(tool_call("ask_clarification", "ask1", question="Go on?", clarification_type="approach_choice")),
        calls(tool_call("bash", "b3", command=f"cat {UD}/outputs/a.txt; ls {UD}/workspace | wc -l")),
        answer("done"),
    ]
    model = write_script(tmp_path, script)
    async with running_worker(client, config_a):
        handle = await start_run(client, config_a, "work", model=model, thread_id=thread.thread_id)
        assert (await settle(handle)).status == "awaiting_input"
    # The pod is lost while the run waits (node drained, swept): only the bucket still has the files.
    [pod] = cluster.names("pods")
    KubernetesSandboxProvider(
        KubernetesSandboxSettings.model_validate(cluster.sandbox_settings()["kubernetes"])
    ).release(pod.removeprefix("sandbox-"))
    async with running_worker(client, config_b):
        await handle.execute_update("reply", ReplyInput(answer="yes"), result_type=RunView)
        final = await handle.result()
    assert final.status == "completed"
    assert (await _tool_outputs(config_b, thread.thread_id))[-1] == "from A\n0\n"
    assert cluster.creations("pods", pod) == 2  # a new pod, on a fresh volume: the files came from the bucket
    assert not (tmp_path / "b" / "users").exists()  # and no working copy on the worker: pods keep their own
    assert _stored(_files(config_b), thread) == ["outputs/a.txt"]


# -- one tool call at a time, straight through the activity ------------------------------------------------------


async def test_excluded_names_symlinks_and_foreign_keys_never_cross(
    tmp_path: Path, cluster: Cluster, s3_storage: dict[str, Any], s3_server: S3Server, s3_bucket: str
) -> None:
    config = make_config(tmp_path / "home", "unused:1", storage={**s3_storage, "sync_exclude": ["node_modules"]})
    files = _files(config)
    thread = ThreadRef(config.user_id, unique("thread"))
    files.write(thread, f"{UD}/workspace/node_modules/from-bucket.js", b"bucket")
    files.write(thread, f"{UD}/workspace/app.js", b"app")
    raw_prefix = s3_storage["s3"]["prefix"] + files.prefix(thread)
    s3_server.client().put_object(Bucket=s3_bucket, Key=raw_prefix + "notes.txt", Body=b"outside the folders")
    tools = _tools(cluster, files)
    listing = await _bash(tools, thread, f"cd {UD} && find . -type f -not -name '.hartflow-sync.json' | sort")
    assert listing == "./workspace/app.js\n"
    made = "mkdir -p node_modules/x && echo pod > node_modules/x/i.js && ln -s /etc/passwd leak && rm app.js"
    await _bash(tools, thread, made)
    # app.js deleted, nothing pushed: neither the pod's node_modules nor the link; foreign keys left alone.
    assert _stored(files, thread) == ["notes.txt", "workspace/node_modules/from-bucket.js"]
    [pod] = cluster.names("pods")
    assert (cluster.kubelet.root_of(pod) / "workspace/node_modules/x/i.js").read_text() == "pod\n"


async def test_the_sync_after_a_timed_out_command_brings_back_what_it_wrote(
    tmp_path: Path, cluster: Cluster, s3_storage: dict[str, Any]
) -> None:
    files = _files(make_config(tmp_path / "home", "unused:1", storage=s3_storage))
    thread = ThreadRef("default", unique("thread"))
    tools = _tools(cluster, files, bash_timeout=2)
    report = await _bash(tools, thread, f"echo partial > {UD}/outputs/partial.txt; sleep 60")
    assert "timed out" in report.lower()
    assert files.read(thread, f"{UD}/outputs/partial.txt") == b"partial\n"


async def test_a_30mb_file_crosses_both_ways_intact_in_chunks(
    tmp_path: Path, cluster: Cluster, s3_storage: dict[str, Any]
) -> None:
    files = _files(make_config(tmp_path / "home", "unused:1", storage=s3_storage))
    thread = ThreadRef("default", unique("thread"))
    size = 30_000_000
    assert size > 3 * SYNC_CHUNK_BYTES
    incoming = os.urandom(size)
    files.write(thread, f"{UD}/uploads/in.bin", incoming)
    tools = _tools(cluster, files)
    command = f"sha256sum < {UD}/uploads/in.bin | cut -c1-64; head -c {size} /dev/urandom > {UD}/outputs/big.bin"
    assert await _bash(tools, thread, command) == hashlib.sha256(incoming).hexdigest() + "\n"
    [pod] = cluster.names("pods")
    produced = (cluster.kubelet.root_of(pod) / "outputs/big.bin").read_bytes()
    stored = files.read(thread, f"{UD}/outputs/big.bin")
    assert stored is not None and len(stored) == size
    assert hashlib.sha256(stored).digest() == hashlib.sha256(produced).digest()
    log = (tmp_path / "kubelet" / f"{pod}-1.log").read_text()  # the pod's server log: one line per request
    assert log.count("/v1/files/read") >= 4 and log.count("/v1/files/write?") >= 4  # streamed, not in one body


async def test_an_externalized_tool_output_reaches_the_pod_and_outlives_it(
    tmp_path: Path, cluster: Cluster, s3_storage: dict[str, Any]
) -> None:
    files = _files(make_config(tmp_path / "home", "unused:1", storage=s3_storage))
    thread = ThreadRef("default", unique("thread"))
    saved = f"{UD}/outputs/.tool-results/bash-b1.log"
    # Saved while no pod exists: the activity writes the thread's files, never through a sandbox.
    assert ToolOutputActivities(files).externalize(ExternalizeInput(thread, None, saved, "line 1\nline 2\n")).saved
    tools = _tools(cluster, files)
    read = await tools.execute(ToolCallInput(thread, tool_call("read_file", path=saved, start_line=2, end_line=2)))
    assert read.content == "line 2"
    await tools.release(SandboxReleaseInput(thread, read.sandbox_id))
    assert not cluster.names("pods") and files.read(thread, saved) == b"line 1\nline 2\n"
