"""Thread files cannot leave the thread, whatever a run left in its folders (issue 24): a symlinked ``outputs``,
``uploads``, ``user-data`` or thread folder, made by anything in a run that can make links (host bash, an MCP
tool), is never followed by the API's artifact and upload routes (both storage backends), the CLI's upload, the
worker's working copy sync, the local sandbox, or a thread's deletion. Refusals are a 4xx with a one-line detail
and nothing written; no route answers 5xx or logs a traceback.

Real components throughout: the API on a real uvicorn (``workers/testing/inprocess_api.py``), the filesystem and
S3 stores, the local sandbox provider. The pod's ``/v1/files`` is covered in ``tests/test_sandbox_server.py``.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from langgraph_sdk.errors import NotFoundError
from temporalio.client import Client

from activities.sandbox import SandboxError
from activities.sandbox.local import LocalSandboxProvider
from activities.storage.filesystem import FilesystemObjectStore
from activities.thread_files import ThreadFiles
from activities.thread_lifecycle import delete_thread
from tests.support.tenants import as_user, bearer_api, sdk_as
from vocabulary.contracts import ThreadRef
from workers.cli import run_command
from workers.config import open_object_store
from workers.testing import make_config, serving_api


def user_data(home: Path, user: str, thread_id: str) -> Path:
    return home / "users" / user / "threads" / thread_id / "user-data"


def assert_refused(response: httpx.Response, *leaked: str) -> None:
    """A 4xx (400 or 404) with a one-line detail, and none of the ``leaked`` texts anywhere in it."""
    assert response.status_code in (400, 404), (response.status_code, response.text)
    detail = response.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail, detail
    for text in leaked:
        assert text not in response.text


class _Tracebacks(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            self.records.append(record)


@pytest.fixture
def tracebacks() -> Iterator[_Tracebacks]:
    """What the server logged with a traceback or as an error (uvicorn's loggers do not reach the root)."""
    handler = _Tracebacks()
    loggers = [logging.getLogger(name) for name in ("uvicorn", "uvicorn.error", "fastapi", "workers", "activities")]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler
    for logger in loggers:
        logger.removeHandler(handler)
    assert not handler.records, [record.getMessage() for record in handler.records]


@pytest.fixture
async def fs_api(home: Path, temporal_address: str, client: Client) -> AsyncIterator[str]:
    async with serving_api(make_config(home, temporal_address, api=bearer_api()), client) as url:
        yield url


async def new_thread(url: str, user: str) -> str:
    thread_id: str = (await sdk_as(url, user).threads.create())["thread_id"]
    return thread_id


# -- the API on the filesystem backend ---------------------------------------------------------------------------


async def test_outputs_linked_to_the_root_serves_no_host_file(fs_api: str, home: Path, tracebacks: _Tracebacks) -> None:
    thread_id = await new_thread(fs_api, "alice")
    folder = user_data(home, "alice", thread_id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "outputs").symlink_to("/")  # `ln -s / /mnt/user-data/outputs`, from host bash or an MCP tool
    async with as_user(fs_api, "alice") as api:
        for path in ("etc/passwd", "mnt/user-data/outputs/etc/passwd", "proc/self/environ", "etc/hostname"):
            response = await api.get(f"/api/threads/{thread_id}/artifacts/{path}")
            assert_refused(response, "root:", "PATH=")


async def test_uploads_linked_to_another_users_folder_are_neither_written_listed_nor_deleted(
    fs_api: str, home: Path, tracebacks: _Tracebacks
) -> None:
    alices, bobs = await new_thread(fs_api, "alice"), await new_thread(fs_api, "bob")
    async with as_user(fs_api, "bob") as as_bob:
        sent = await as_bob.post(f"/api/threads/{bobs}/uploads", files={"files": ("bob.txt", b"bob's own")})
        assert sent.status_code == 200, sent.text
    victim = user_data(home, "bob", bobs) / "uploads"
    before = sorted(os.listdir(victim))
    folder = user_data(home, "alice", alices)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "uploads").symlink_to(victim)
    async with as_user(fs_api, "alice") as api:
        written = await api.post(f"/api/threads/{alices}/uploads", files={"files": ("a.txt", b"alice's")})
        assert_refused(written)
        listed = await api.get(f"/api/threads/{alices}/uploads/list")
        assert listed.status_code == 200 and listed.json() == {"files": [], "count": 0}, listed.text
        assert_refused(await api.delete(f"/api/threads/{alices}/uploads/bob.txt"))
    assert sorted(os.listdir(victim)) == before == ["bob.txt"]
    assert (victim / "bob.txt").read_bytes() == b"bob's own"


async def test_a_linked_user_data_thread_folder_or_nested_folder_leads_nowhere(
    fs_api: str, home: Path, tracebacks: _Tracebacks
) -> None:
    alices, bobs = await new_thread(fs_api, "alice"), await new_thread(fs_api, "bob")
    bobs_folder = home / "users/bob/threads" / bobs
    [record] = [path.relative_to(bobs_folder).as_posix() for path in bobs_folder.rglob("*") if path.is_file()]
    (bobs_folder / "user-data/outputs").mkdir(parents=True)
    (bobs_folder / "user-data/outputs/report.md").write_text("bob's report")
    alices_folder = home / "users/alice/threads" / alices
    (alices_folder / "user-data/outputs").mkdir(parents=True)
    async with as_user(fs_api, "alice") as api:

        async def refused(path: str) -> None:
            assert_refused(await api.get(f"/api/threads/{alices}/artifacts/{path}"), "bob's report", bobs)

        (alices_folder / "user-data/outputs/sub").symlink_to(bobs_folder / "user-data/outputs")
        await refused("sub/report.md")
        (alices_folder / "user-data/outputs/sub").unlink()
        (alices_folder / "user-data/outputs").rmdir()
        (alices_folder / "user-data/outputs").symlink_to(bobs_folder)  # bob's thread folder, his records inside
        await refused(record)
        (alices_folder / "user-data/outputs").unlink()
        (alices_folder / "user-data").rmdir()
        (alices_folder / "user-data").symlink_to(bobs_folder / "user-data")
        await refused("report.md")
        sent = await api.post(f"/api/threads/{alices}/uploads", files={"files": ("a.txt", b"alice's")})
        assert_refused(sent)
    assert not (bobs_folder / "user-data/uploads").exists()
    assert (bobs_folder / "user-data/outputs/report.md").read_text() == "bob's report"


async def test_a_thread_folder_replaced_by_a_link_is_not_that_thread(
    fs_api: str, home: Path, tracebacks: _Tracebacks
) -> None:
    alice, bob = sdk_as(fs_api, "alice"), sdk_as(fs_api, "bob")
    bobs = (await bob.threads.create(metadata={"owner": "bob"}))["thread_id"]
    bobs_folder = home / "users/bob/threads" / bobs
    (bobs_folder / "user-data/outputs").mkdir(parents=True)
    (bobs_folder / "user-data/outputs/report.md").write_text("bob's report")
    (home / "users/alice/threads").mkdir(parents=True, exist_ok=True)
    (home / "users/alice/threads" / bobs).symlink_to(bobs_folder)
    with pytest.raises(NotFoundError):
        await alice.threads.get(bobs)
    async with as_user(fs_api, "alice") as api:
        assert_refused(await api.get(f"/api/threads/{bobs}/artifacts/report.md"), "bob's report")
        assert_refused(await api.get(f"/api/threads/{bobs}/uploads/list"))
    assert (await bob.threads.get(bobs))["metadata"] == {"owner": "bob"}


# -- the S3 backend: the worker's working copy is where links live --------------------------------------------------


async def test_a_linked_outputs_folder_in_a_working_copy_crosses_neither_way(
    home: Path, tmp_path: Path, temporal_address: str, client: Client, s3_storage: dict[str, Any]
) -> None:
    config = make_config(home, temporal_address, storage=s3_storage, api=bearer_api())
    store = open_object_store(config)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("host secret")
    async with serving_api(config, client) as url:
        thread_id = await new_thread(url, "alice")
        thread = ThreadRef("alice", thread_id)
        files = ThreadFiles(store, home)
        folder = user_data(home, "alice", thread_id)
        for name in ("workspace", "uploads"):
            (folder / name).mkdir(parents=True)
        (folder / "outputs").symlink_to(outside)  # what a tool call left in this worker's working copy
        files.push(thread)  # after the tool call
        store.put(f"{ThreadFiles.prefix(thread)}outputs/planted.txt", b"from storage")
        files.pull(thread)  # before the next one
        async with as_user(url, "alice") as api:
            assert_refused(await api.get(f"/api/threads/{thread_id}/artifacts/secret.txt"), "host secret")
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert store.head(f"{ThreadFiles.prefix(thread)}outputs/secret.txt") is None


# -- the CLI, the local sandbox, a thread's deletion ------------------------------------------------------------------


def test_cli_upload_into_a_linked_uploads_folder_writes_nothing(
    home: Path, tmp_path: Path, temporal_address: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config_file = tmp_path / "hartflow.yaml"
    config_file.write_text(yaml.safe_dump({"storage": {"home": str(home)}, "temporal": {"address": temporal_address}}))
    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / "data.csv").write_text("a,b\n")
    folder = user_data(home, "default", "t-link")
    folder.mkdir(parents=True)
    (folder / "uploads").symlink_to(victim)
    assert run_command(["upload", "t-link", str(tmp_path / "data.csv"), "--config", str(config_file)]) == 2
    error = capsys.readouterr().err
    assert "symbolic link" in error and "Traceback" not in error and len(error.strip().splitlines()) == 1
    assert os.listdir(victim) == []


def test_the_local_sandbox_neither_chmods_nor_reads_through_a_link(home: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    folder = user_data(home, "alice", "t1")
    folder.mkdir(parents=True)
    (folder / "outputs").symlink_to(victim)
    provider = LocalSandboxProvider(home)
    with pytest.raises(SandboxError, match="symbolic link"):
        provider.acquire("alice", "t1")
    assert victim.stat().st_mode & 0o777 == 0o700  # not made world-writable through the link

    bobs = user_data(home, "bob", "t1")
    (bobs / "outputs").mkdir(parents=True)
    (bobs / "outputs/report.md").write_text("bob's report")
    shutil.rmtree(folder)  # removes the link, not what it points at
    folder.symlink_to(bobs)  # alice's user-data is bob's, for a worker that never saw it before
    sandbox = LocalSandboxProvider(home).get("local:alice:t1")
    assert sandbox is not None
    with pytest.raises(SandboxError, match="Access denied"):
        sandbox.read_file("/mnt/user-data/outputs/report.md")
    with pytest.raises(SandboxError, match="Access denied"):
        sandbox.write_file("/mnt/user-data/outputs/report.md", "overwritten")
    assert (bobs / "outputs/report.md").read_text() == "bob's report"


def test_deleting_a_thread_whose_folder_is_a_link_keeps_what_it_points_at(home: Path) -> None:
    store = FilesystemObjectStore(home)
    bobs = ThreadRef("bob", "t1")
    store.put(f"{ThreadFiles.prefix(bobs)}outputs/report.md", b"bob's report")
    (home / "users/alice/threads").mkdir(parents=True)
    (home / "users/alice/threads/t1").symlink_to(home / "users/bob/threads/t1")
    delete_thread(store, ThreadRef("alice", "t1"), home, [])
    assert not (home / "users/alice/threads/t1").is_symlink()  # the link itself is gone
    assert store.get(f"{ThreadFiles.prefix(bobs)}outputs/report.md") == b"bob's report"
