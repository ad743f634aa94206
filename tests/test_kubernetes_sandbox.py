"""The kubernetes provider against kmock's API emulator (real HTTP, the official client) with a test kubelet
running each sandbox pod as a real sandbox-server process; runs on the session's real Temporal dev server."""

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

import kmock
import kubernetes_validate
import pytest
import yaml
from langchain_core.messages import ToolMessage
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus

from activities.sandbox.kubernetes import KubernetesSandboxProvider, SandboxNotReadyError
from activities.sandbox.kubernetes_manifests import (
    COMMON_LABELS,
    SANDBOX_ID_LABEL,
    THREAD_ID_LABEL,
    WORKFLOW_ID_ANNOTATION,
    WORKFLOW_ID_LABEL,
    label_value,
    pod_manifest,
    pod_name,
    sandbox_id_for,
    secret_manifest,
    service_manifest,
    service_name,
)
from activities.sandbox.kubernetes_settings import KubernetesSandboxSettings
from activities.sandbox.remote import SandboxUnavailableError
from tests.support import start_run
from tests.support.kube import REPO, Cluster, eventually, eventually_async
from vocabulary.contracts import SANDBOX_RELEASE, ThreadRef
from vocabulary.workflow_ids import run_workflow_id
from workers.config import HartflowConfig
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, unique, write_script
from workers.testing.history import history_events, scheduled_activities
from workers.testing.processes import kill_hard, worker_process
from workers.worker import SWEEPER_SCHEDULE_PREFIX, ensure_sweeper_schedule, thread_store
from workflows.sandbox_sweeper import SandboxSweeperWorkflow, SweepInput, SweepResult

WS = "/mnt/user-data/workspace"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster.running(tmp_path / "kubelet") as running:
        yield running


def _settings(cluster: Cluster, **overrides: Any) -> KubernetesSandboxSettings:
    return KubernetesSandboxSettings.model_validate(cluster.sandbox_settings(**overrides)["kubernetes"])


def _provider(cluster: Cluster, **overrides: Any) -> KubernetesSandboxProvider:
    return KubernetesSandboxProvider(_settings(cluster, **overrides), bash_timeout=30)


def _config(cluster: Cluster, home: Path, address: str, **overrides: Any) -> HartflowConfig:
    # Short heartbeats: a killed worker's tool call is retried elsewhere within seconds.
    run = {"tool_call": {"heartbeat_seconds": 2}, **overrides.pop("run", {})}
    return make_config(home, address, sandbox=cluster.sandbox_settings(), run=run, **overrides)


def _pod_requests(cluster: Cluster, action: kmock.action) -> int:
    return len(list(cluster.emulator[action, kmock.resource("v1/pods")]))


# -- names, labels and the pod spec (pure) ---------------------------------------------------------------------


def test_names_are_deerflows_deterministic_ids() -> None:
    sandbox_id = sandbox_id_for("alice", "thread-1")
    assert sandbox_id == hashlib.sha256(b"alice:thread-1").hexdigest()[:16]
    assert pod_name(sandbox_id) == f"sandbox-{sandbox_id}"
    assert service_name(sandbox_id) == f"sandbox-{sandbox_id}-svc"
    assert sandbox_id_for("alice", "thread-2") != sandbox_id


@pytest.mark.parametrize("value", ["t" * 64, "hartflow-" + "x" * 64, "-leading", "trailing_", "ok-thread_1"])
def test_label_values_are_always_valid(value: str) -> None:
    label = label_value(value)
    assert len(label) <= 63
    assert label[0].isalnum() and label[-1].isalnum()
    assert all(c.isalnum() or c in "-_." for c in label)
    if len(value) <= 63 and value[0].isalnum() and value[-1].isalnum():
        assert label == value
    assert label_value(value + "z") != label


def test_the_pod_is_locked_down_with_deerflows_resources() -> None:
    settings = KubernetesSandboxSettings()
    identity = {"hartflow.dev/user-id": "u", "hartflow.dev/thread-id": "t" * 64, WORKFLOW_ID_ANNOTATION: "w"}
    pod = pod_manifest("0123456789abcdef", settings, identity, bash_timeout=600)
    spec = pod["spec"]
    [container] = spec["containers"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["resources"] == {
        "requests": {"cpu": "100m", "memory": "256Mi", "ephemeral-storage": "500Mi"},
        "limits": {"cpu": "1000m", "memory": "1Gi", "ephemeral-storage": "500Mi"},
    }
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    # Writable: /mnt/user-data and /tmp only, both volumes.
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/mnt/user-data", "/tmp"}
    assert spec["volumes"] == [{"name": "user-data", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}]
    token = next(e for e in container["env"] if e["name"] == "HARTFLOW_SANDBOX_TOKEN")
    assert token["valueFrom"] == {"secretKeyRef": {"name": "sandbox-0123456789abcdef-token", "key": "token"}}
    labels = pod["metadata"]["labels"]
    assert COMMON_LABELS.items() <= labels.items()
    assert labels[SANDBOX_ID_LABEL] == "0123456789abcdef"
    assert labels[THREAD_ID_LABEL] == label_value("t" * 64) != "t" * 64
    assert pod["metadata"]["annotations"]["hartflow.dev/thread-id"] == "t" * 64


def test_a_claim_keeps_user_data_beyond_the_pod() -> None:
    settings = KubernetesSandboxSettings(user_data_claim="hartflow-user-data")
    identity = {"hartflow.dev/user-id": "u1", "hartflow.dev/thread-id": "t1"}
    spec = pod_manifest("0123456789abcdef", settings, identity, bash_timeout=600)["spec"]
    assert spec["volumes"][0] == {"name": "user-data", "persistentVolumeClaim": {"claimName": "hartflow-user-data"}}
    assert spec["containers"][0]["volumeMounts"][0]["subPath"] == "users/u1/threads/t1/user-data"


@pytest.mark.parametrize("claim", [None, "hartflow-user-data"])
def test_generated_objects_pass_strict_schema_validation(claim: str | None) -> None:
    settings = KubernetesSandboxSettings(user_data_claim=claim)
    identity = {"hartflow.dev/user-id": "u", "hartflow.dev/thread-id": "t", WORKFLOW_ID_ANNOTATION: "hartflow-t"}
    for manifest in (
        pod_manifest("0123456789abcdef", settings, identity, bash_timeout=600),
        service_manifest("0123456789abcdef", settings, identity),
        secret_manifest("0123456789abcdef", "token", settings, identity),
    ):
        kubernetes_validate.validate(manifest, "1.37.0", strict=True)


# -- the provider against the emulated API -----------------------------------------------------------------------


def test_acquire_creates_labelled_objects_and_adopts_them_from_another_worker(cluster: Cluster) -> None:
    sandbox_id = _provider(cluster).acquire("u1", "t1", run_key="hartflow-t1")
    pod = cluster.core.read_namespaced_pod(pod_name(sandbox_id), cluster.namespace)
    assert pod.metadata.labels[WORKFLOW_ID_LABEL] == "hartflow-t1"
    assert pod.metadata.labels[THREAD_ID_LABEL] == "t1"
    assert pod.metadata.annotations[WORKFLOW_ID_ANNOTATION] == "hartflow-t1"
    service = cluster.core.read_namespaced_service(service_name(sandbox_id), cluster.namespace)
    assert service.spec.selector == {SANDBOX_ID_LABEL: sandbox_id}

    other_worker = _provider(cluster)
    assert other_worker.acquire("u1", "t1", run_key="hartflow-t1") == sandbox_id  # 409 → adopted
    sandbox = other_worker.get(sandbox_id)
    assert sandbox is not None and sandbox.execute_command("echo adopted") == "adopted\n"
    assert _pod_requests(cluster, kmock.action.CREATE) == 2
    assert cluster.creations("pods", pod_name(sandbox_id)) == 1
    assert cluster.creations("secrets", f"sandbox-{sandbox_id}-token") == 1


def test_a_restarted_worker_finds_the_pod_and_release_is_idempotent(cluster: Cluster) -> None:
    sandbox_id = _provider(cluster).acquire("u1", "t1")
    restarted = _provider(cluster)
    sandbox = restarted.get(sandbox_id)
    assert sandbox is not None
    sandbox.write_file(f"{WS}/kept.txt", "still here")
    assert sandbox.read_file(f"{WS}/kept.txt") == "still here"

    restarted.release(sandbox_id)
    restarted.release(sandbox_id)  # 404s: already done
    restarted.release("local:default:t1")  # another provider's id: nothing to do
    assert (cluster.names("pods"), cluster.names("services"), cluster.names("secrets")) == ([], [], [])
    assert restarted.get(sandbox_id) is None
    assert _provider(cluster).get("not-a-sandbox-id") is None


def test_a_stale_address_is_forgotten_and_the_next_attempt_acquires_afresh(cluster: Cluster) -> None:
    worker_a, worker_b = _provider(cluster), _provider(cluster)
    sandbox_id = worker_a.acquire("u1", "t1")
    stale = worker_a.get(sandbox_id)
    assert stale is not None
    worker_b.release(sandbox_id)  # e.g. the sweeper, on another worker
    eventually(lambda: pod_name(sandbox_id) not in cluster.kubelet.containers, what="the pod's process to end")
    with pytest.raises(SandboxUnavailableError):
        stale.execute_command("true")
    assert worker_a.get(sandbox_id) is None  # the retried activity then acquires again
    assert worker_a.acquire("u1", "t1") == sandbox_id
    assert cluster.creations("pods", pod_name(sandbox_id)) == 2


def test_a_pod_that_never_gets_ready_is_torn_down_with_a_clear_error(cluster: Cluster) -> None:
    sandbox_id = sandbox_id_for("u1", "stuck")
    cluster.kubelet.hold.add(pod_name(sandbox_id))
    with pytest.raises(SandboxNotReadyError) as error:
        _provider(cluster, ready_timeout_seconds=1).acquire("u1", "stuck")
    assert str(error.value) == (
        f"sandbox pod {cluster.namespace}/sandbox-{sandbox_id} did not become ready within 1s; last condition: "
        "Ready=False (ContainersNotReady): containers with unready status: [sandbox]; "
        'container sandbox waiting: ImagePullBackOff: Back-off pulling image "hartflow-sandbox:0.1.0"'
    )
    assert (cluster.names("pods"), cluster.names("services"), cluster.names("secrets")) == ([], [], [])


# -- runs ------------------------------------------------------------------------------------------------------


async def _tool_messages(config: HartflowConfig, thread_id: str) -> list[ToolMessage]:
    snapshot = await asyncio.to_thread(thread_store(config).load, ThreadRef(config.user_id, thread_id))
    return [m for m in snapshot.state.messages if isinstance(m, ToolMessage)]


def _nothing_left(cluster: Cluster) -> bool:
    return not (cluster.names("pods") or cluster.names("services") or cluster.names("secrets"))


async def test_lazy_acquire_on_the_first_bash_call_and_release_on_success(
    client: Client, home: Path, temporal_address: str, cluster: Cluster
) -> None:
    config = _config(cluster, home, temporal_address)
    thread = unique("thread")
    talk = write_script(home, [answer("no tools yet")])
    model = write_script(
        home, [calls(tool_call("bash", command="echo hi from $(pwd) > out.txt; cat out.txt")), answer("done")]
    )
    async with running_worker(client, config):
        first = await settle(await start_run(client, config, "just talk", model=talk, thread_id=thread))
        assert first.final_message == "no tools yet"
        assert _pod_requests(cluster, kmock.action.CREATE) == 0  # no sandbox tool, no pod
        handle = await start_run(client, config, "run something", model=model, thread_id=thread)
        view = await settle(handle)
        await handle.result()
    assert view.status == "completed" and view.final_message == "done"
    [message] = await _tool_messages(config, thread)
    assert message.content == "hi from /mnt/user-data/workspace\n"
    sandbox_id = sandbox_id_for(config.user_id, thread)
    assert cluster.creations("pods", pod_name(sandbox_id)) == 1
    [created] = [r.data for r in cluster.emulator[kmock.action.CREATE, kmock.resource("v1/pods")]]
    assert created["metadata"]["annotations"][WORKFLOW_ID_ANNOTATION] == run_workflow_id(config.user_id, thread)
    assert _nothing_left(cluster)  # released by after_agent


async def test_parallel_tool_calls_acquire_once(
    client: Client, home: Path, temporal_address: str, cluster: Cluster
) -> None:
    config = _config(cluster, home, temporal_address)
    thread = unique("thread")
    model = write_script(
        home,
        [
            calls(*(tool_call("bash", f"c{i}", command=f"echo {i} > f{i}.txt; ls") for i in range(3))),
            calls(tool_call("ls", path=WS)),
            answer("done"),
        ],
    )
    async with running_worker(client, config):
        handle = await start_run(client, config, "three at once", model=model, thread_id=thread)
        view = await settle(handle)
        await handle.result()
    assert view.status == "completed"
    *_, listing = await _tool_messages(config, thread)
    assert listing.content == "\n".join(f"{WS}/f{i}.txt" for i in range(3))  # one pod saw all three writes
    assert _pod_requests(cluster, kmock.action.CREATE) == 1
    assert cluster.creations("pods", pod_name(sandbox_id_for(config.user_id, thread))) == 1
    assert _nothing_left(cluster)


async def test_a_failed_run_releases_its_pod(
    client: Client, home: Path, temporal_address: str, cluster: Cluster
) -> None:
    config = _config(
        cluster, home, temporal_address, run={"extensions": ["tests.support.failing_middlewares:FailOnFinalAnswer"]}
    )
    model = write_script(home, [calls(tool_call("bash", command="echo ok")), answer("never delivered")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "fail after a tool", model=model)
        view = await settle(handle)
    assert view.status == "error"
    assert _pod_requests(cluster, kmock.action.CREATE) == 1
    assert _nothing_left(cluster)


def _cli(config_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARTFLOW_")}
    return subprocess.run(
        [sys.executable, "-m", "workers.cli", *args, "--config", str(config_file), "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _write_config(config: HartflowConfig, path: Path) -> Path:
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")), encoding="utf-8")
    return path


async def _started(cluster: Cluster, pod: str, marker: str) -> None:
    def running() -> bool:
        return pod in cluster.kubelet.containers and (cluster.kubelet.root_of(pod) / "workspace" / marker).exists()

    await eventually_async(running, timeout=60, what=f"{marker!r} to appear in {pod}")


async def test_hartflow_cancel_releases_the_pod(
    client: Client, home: Path, temporal_address: str, cluster: Cluster
) -> None:
    config = _config(cluster, home, temporal_address)
    thread = unique("thread")
    model = write_script(
        home,
        [
            calls(tool_call("bash", command="echo acquired")),
            calls(tool_call("bash", command="touch started; sleep 30")),
            answer("never"),
        ],
    )
    pod = pod_name(sandbox_id_for(config.user_id, thread))
    async with running_worker(client, config):
        await start_run(client, config, "a long command", model=model, thread_id=thread)
        await _started(cluster, pod, "started")
        done = await asyncio.to_thread(_cli, _write_config(config, home / "hartflow.yaml"), "cancel", thread)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "cancelled"
    assert cluster.creations("pods", pod) == 1
    assert _nothing_left(cluster)  # after_agent released it before the run closed
    await eventually_async(lambda: pod not in cluster.kubelet.containers, what="the pod's process to end")


async def test_a_run_cancelled_during_its_first_sandbox_call_releases_the_pod(
    client: Client, home: Path, temporal_address: str, cluster: Cluster
) -> None:
    """Cancelled during its first sandbox call, the run never learnt the sandbox id (the tool activity reports
    it when it returns): its compensation releases the thread's sandbox by thread instead."""
    config = _config(cluster, home, temporal_address)
    thread = unique("thread")
    model = write_script(home, [calls(tool_call("bash", command="touch started; sleep 30")), answer("never")])
    pod = pod_name(sandbox_id_for(config.user_id, thread))
    async with running_worker(client, config):
        handle = await start_run(client, config, "a long command", model=model, thread_id=thread)
        await _started(cluster, pod, "started")
        await handle.cancel()
        view = await settle(handle)
        await eventually_async(lambda: _closed(handle), what="the run to close")
        events = await history_events(handle)
    assert view.status == "cancelled"
    assert cluster.creations("pods", pod) == 1
    assert _pod_requests(cluster, kmock.action.DELETE) == 1
    assert _nothing_left(cluster)  # after_agent released it before the run closed
    releases = [summary for name, summary in scheduled_activities(events) if name == SANDBOX_RELEASE]
    assert releases == ["Sandbox.after_agent · release (by thread)"]


async def _closed(handle: Any) -> bool:
    return (await handle.describe()).status != WorkflowExecutionStatus.RUNNING


async def test_a_killed_worker_leaves_a_pod_the_resumed_run_reuses(
    client: Client, home: Path, temporal_address: str, cluster: Cluster
) -> None:
    config = _config(cluster, home, temporal_address)
    thread = unique("thread")
    # The first attempt marks the pod's disk and hangs; the retried one finds the mark: same pod, same disk.
    command = "if [ -f marker ]; then echo resumed in the same pod; else touch marker; sleep 60; fi"
    model = write_script(home, [calls(tool_call("bash", command=command)), answer("done")])
    pod = pod_name(sandbox_id_for(config.user_id, thread))
    with worker_process(config, home / "hartflow.yaml") as worker:
        handle = await start_run(client, config, "survive a crash", model=model, thread_id=thread)
        await _started(cluster, pod, "marker")
        kill_hard(worker)
    async with running_worker(client, config):
        view = await settle(handle)
        await handle.result()
    assert view.status == "completed" and view.final_message == "done"
    [message] = await _tool_messages(config, thread)
    assert message.content == "resumed in the same pod\n"
    [started] = [
        e.activity_task_started_event_attributes
        for e in await history_events(handle)
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.attempt > 1
    ]
    assert started.attempt == 2  # the dead worker's attempt timed out on its heartbeat; the second one ran
    assert _pod_requests(cluster, kmock.action.CREATE) == 2  # the resumed attempt's create got a 409 …
    assert cluster.creations("pods", pod) == 1  # … and adopted the pod
    assert _nothing_left(cluster)
    # The worker process created its sweeper schedule at start.
    await client.get_schedule_handle(f"{SWEEPER_SCHEDULE_PREFIX}{config.temporal.task_queue}").delete()


# -- the sweeper -------------------------------------------------------------------------------------------------


async def _paused_run(client: Client, config: HartflowConfig, home: Path) -> str:
    thread = unique("thread")
    model = write_script(home, [calls(tool_call("ask_clarification", question="Which one?"))])
    view = await settle(await start_run(client, config, "ask me", model=model, thread_id=thread))
    assert view.status == "awaiting_input"
    return thread


async def test_the_scheduled_sweeper_deletes_orphans_and_keeps_live_sandboxes(
    client: Client, home: Path, temporal_address: str, cluster: Cluster
) -> None:
    config = _config(cluster, home, temporal_address)
    provider = _provider(cluster)
    async with running_worker(client, config):
        live_thread = await _paused_run(client, config, home)
        closed_run = await start_run(client, config, "hi", model=write_script(home, [answer("bye")]))
        closed = await closed_run.result()
        live = await asyncio.to_thread(
            provider.acquire, config.user_id, live_thread, run_key=run_workflow_id(config.user_id, live_thread)
        )
        finished = await asyncio.to_thread(
            provider.acquire, config.user_id, closed.thread_id, run_key=closed.workflow_id
        )
        orphan = await asyncio.to_thread(provider.acquire, config.user_id, "never-ran", run_key="hartflow-never-ran")

        schedule_id = await ensure_sweeper_schedule(client, config)
        assert schedule_id is not None
        schedule = client.get_schedule_handle(schedule_id)
        try:
            await schedule.trigger()

            async def first_action() -> str | None:
                actions = (await schedule.describe()).info.recent_actions
                return actions[0].action.workflow_id if actions else None

            sweep_id = await eventually_async(first_action, what="the schedule to start a sweep")
            result = await client.get_workflow_handle(sweep_id, result_type=SweepResult).result()
        finally:
            await schedule.delete()
            await client.get_workflow_handle(run_workflow_id(config.user_id, live_thread)).terminate()
    assert result.examined == 3
    assert {(s.sandbox_id, s.reason) for s in result.deleted} == {(finished, "run closed"), (orphan, "run not found")}
    assert cluster.names("pods") == [pod_name(live)]
    assert cluster.names("services") == [service_name(live)]


async def test_hartflow_sandboxes_list_and_sweep(
    client: Client, home: Path, temporal_address: str, cluster: Cluster
) -> None:
    config = _config(cluster, home, temporal_address)
    config_file = _write_config(config, home / "hartflow.yaml")
    provider = _provider(cluster)
    async with running_worker(client, config):
        live_thread = await _paused_run(client, config, home)
        live = await asyncio.to_thread(
            provider.acquire, config.user_id, live_thread, run_key=run_workflow_id(config.user_id, live_thread)
        )
        orphan = await asyncio.to_thread(provider.acquire, config.user_id, "gone", run_key="hartflow-gone")

        listed = await asyncio.to_thread(_cli, config_file, "sandboxes", "list")
        assert listed.returncode == 0, listed.stderr
        rows = {row["sandbox_id"]: row for row in json.loads(listed.stdout)["sandboxes"]}
        assert {k: (v["thread_id"], v["run_state"], v["ready"]) for k, v in rows.items()} == {
            live: (live_thread, "running", True),
            orphan: ("gone", "missing", True),
        }

        # Everything is older than 1 ms: a dry run names both pods and deletes neither.
        dry = await client.execute_workflow(
            SandboxSweeperWorkflow.run,
            SweepInput(max_age_seconds=0.001, dry_run=True),
            id=unique("sweep"),
            task_queue=config.temporal.task_queue,
            result_type=SweepResult,
        )
        assert {(s.sandbox_id, s.reason) for s in dry.deleted} == {
            (live, "older than 0:00:00.001000"),
            (orphan, "run not found"),
        }
        assert len(cluster.names("pods")) == 2

        swept = await asyncio.to_thread(_cli, config_file, "sandboxes", "sweep")
        await client.get_workflow_handle(run_workflow_id(config.user_id, live_thread)).terminate()
    assert swept.returncode == 0, swept.stderr
    result = json.loads(swept.stdout)
    assert (result["examined"], result["dry_run"]) == (2, False)
    assert [(s["sandbox_id"], s["reason"]) for s in result["deleted"]] == [(orphan, "run not found")]
    assert cluster.names("pods") == [pod_name(live)]
