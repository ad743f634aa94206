"""A thread's files on the configured storage (issue #6 part B): the key layout and its path safety, the S3
working copy's pull/push (changes, deletions, only what changed, never outside the thread), and real runs on
both backends — uploads, view_image, outputs, externalised tool output, and a run continued by another worker
with another home."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from activities.sandbox.local import LocalSandboxProvider
from activities.storage.s3 import S3ObjectStore
from activities.thread_file_sync import MANIFEST_NAME
from activities.thread_files import PathEscapeError, ThreadFiles, user_data_relative
from activities.tool_output import ToolOutputActivities
from activities.tools import ToolActivities
from activities.uploads import store_uploads
from middlewares.tool_output_budget import externalized_filename
from tests.support import start_run
from vocabulary.contracts import (
    IMAGE_INSPECT,
    IMAGE_LOAD,
    TOOL_EXECUTE,
    UPLOADS_LIST,
    ExternalizeInput,
    ImageInspectResult,
    ImageLoadResult,
    ThreadRef,
    ToolCallInput,
    ToolCallOutput,
    UploadsListResult,
)
from workers.config import HartflowConfig, open_object_store
from workers.payloads import client_for
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, unique, write_script
from workers.testing.history import history_events
from workers.testing.s3 import S3Server
from workflows.run import ReplyInput, RunView

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
RESULTS = "/mnt/user-data/outputs/.tool-results"


@pytest.fixture(params=["filesystem", "s3"])
def storage(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The ``storage`` overrides of one backend (the S3 server starts only for the s3 case)."""
    if request.param == "s3":
        settings: dict[str, Any] = request.getfixturevalue("s3_storage")
        return settings
    return {}


def _files(config: HartflowConfig, home: Path | None = None) -> ThreadFiles:
    return ThreadFiles(open_object_store(config), home or config.home)


def _s3_files(s3_storage: dict[str, Any], home: Path) -> ThreadFiles:
    return ThreadFiles(S3ObjectStore(make_config(home, "unused:1", storage=s3_storage).storage.s3), home)


async def _results(
    client: Client, config: HartflowConfig, handle: WorkflowHandle[Any, Any], activity: str, result_type: type[Any]
) -> list[Any]:
    """The decoded result of every completed ``activity`` of the run (regular or local), in order."""
    events = await history_events(handle)
    names = {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    results = []
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attributes = event.activity_task_completed_event_attributes
            if names[attributes.scheduled_event_id] == activity:
                results.append(attributes.result.payloads)
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            details = event.marker_recorded_event_attributes.details  # a local activity's marker
            if "data" in details and json.loads(details["data"].payloads[0].data).get("activity_type") == activity:
                results.append(details["result"].payloads)
    converter = client_for(client, config).data_converter
    return [(await converter.decode(list(payloads), [result_type]))[0] for payloads in results]


async def _tool_outputs(client: Client, config: HartflowConfig, handle: WorkflowHandle[Any, Any]) -> list[str]:
    return [output.content for output in await _results(client, config, handle, TOOL_EXECUTE, ToolCallOutput)]


# -- the layout and its path safety ------------------------------------------------------------------------------


def test_virtual_paths_become_keys_inside_the_thread_prefix(home: Path) -> None:
    files = ThreadFiles.on_disk(home)
    thread = ThreadRef("u1", "t1")
    assert files.key(thread, "/mnt/user-data/outputs/.tool-results/a.txt") == (
        "users/u1/threads/t1/user-data/outputs/.tool-results/a.txt"
    )
    for bad in (
        "/mnt/user-data/workspace/../../../t2/user-data/workspace/x",
        "/mnt/user-data/workspace/./x",
        "/mnt/user-data/workspace//x",
        "/mnt/user-data/secrets/x",
        "/mnt/user-data/workspace",
        "/mnt/user-data/",
        "/etc/passwd",
        "/mnt/user-data/workspace/a\\..\\b",
        "/mnt/user-data/workspace/a\0b",
    ):
        with pytest.raises(PathEscapeError):
            user_data_relative(bad)
    with pytest.raises(ValueError, match="invalid thread id"):
        files.key(ThreadRef("u1", "../t2"), "/mnt/user-data/workspace/x")


def test_the_filesystem_backend_is_the_sandbox_folders_in_place(home: Path) -> None:
    files = ThreadFiles.on_disk(home)
    thread = ThreadRef("default", "t1")
    assert not files.uses_working_copy
    files.write(thread, "/mnt/user-data/outputs/report.md", b"# hi\n")
    assert (home / "users/default/threads/t1/user-data/outputs/report.md").read_bytes() == b"# hi\n"
    assert files.pull(thread).transferred == [] and files.push(thread).transferred == []
    assert not (home / "users/default/threads/t1" / MANIFEST_NAME).exists()  # no sync state at all
    outside = home.parent / "outside.txt"
    outside.write_text("secret")
    (home / "users/default/threads/t1/user-data/outputs/link.txt").symlink_to(outside)
    with pytest.raises(PathEscapeError):
        files.read(thread, "/mnt/user-data/outputs/link.txt")


# -- the S3 working copy -----------------------------------------------------------------------------------------


def test_two_working_copies_stay_in_sync_through_the_bucket(tmp_path: Path, s3_storage: dict[str, Any]) -> None:
    a, b = _s3_files(s3_storage, tmp_path / "a"), _s3_files(s3_storage, tmp_path / "b")
    thread = ThreadRef("default", "t1")
    prefix = "users/default/threads/t1/user-data/"
    a_data, b_data = tmp_path / "a" / a.prefix(thread), tmp_path / "b" / b.prefix(thread)
    (a_data / "workspace").mkdir(parents=True)
    (a_data / "workspace/notes.txt").write_text("v1")
    (a_data / "outputs/deep/er").mkdir(parents=True)
    (a_data / "outputs/deep/er/blob.bin").write_bytes(bytes(range(256)) * 10)
    (a_data / "workspace/scratch.txt").write_text("tmp")

    everything = ["outputs/deep/er/blob.bin", "workspace/notes.txt", "workspace/scratch.txt"]
    assert sorted(a.push(thread).transferred) == everything
    assert a.store.get(prefix + "workspace/notes.txt") == b"v1"
    assert a.push(thread).transferred == []  # nothing changed: nothing moves

    assert sorted(b.pull(thread).transferred) == everything
    assert (b_data / "outputs/deep/er/blob.bin").read_bytes() == bytes(range(256)) * 10
    assert b.pull(thread).transferred == []

    # B changes one file and deletes another: only those move, and A follows.
    (b_data / "workspace/notes.txt").write_text("v2 from B")
    (b_data / "workspace/scratch.txt").unlink()
    pushed = b.push(thread)
    assert (pushed.transferred, pushed.deleted) == (["workspace/notes.txt"], ["workspace/scratch.txt"])
    assert b.store.head(prefix + "workspace/scratch.txt") is None
    pulled = a.pull(thread)
    assert (pulled.transferred, pulled.deleted) == (["workspace/notes.txt"], ["workspace/scratch.txt"])
    assert (a_data / "workspace/notes.txt").read_text() == "v2 from B"
    assert not (a_data / "workspace/scratch.txt").exists()

    # A direct write (externalised output, an upload) reaches the bucket and the writer's working copy, in sync.
    a.write(thread, "/mnt/user-data/uploads/data.csv", b"x,y\n")
    assert (a_data / "uploads/data.csv").read_bytes() == b"x,y\n"
    assert a.pull(thread).transferred == [] and a.push(thread).transferred == []
    assert b.pull(thread).transferred == ["uploads/data.csv"]


def test_excluded_names_stay_local_to_each_working_copy(tmp_path: Path, s3_storage: dict[str, Any]) -> None:
    exclude = frozenset({"node_modules", ".venv"})
    s3 = S3ObjectStore(make_config(tmp_path, "unused:1", storage=s3_storage).storage.s3)
    a, b = ThreadFiles(s3, tmp_path / "a", exclude=exclude), ThreadFiles(s3, tmp_path / "b", exclude=exclude)
    thread = ThreadRef("default", "t-exclude")
    a_data, b_data = tmp_path / "a" / a.prefix(thread), tmp_path / "b" / b.prefix(thread)
    for worker, data in (("a", a_data), ("b", b_data)):
        (data / "workspace/app/node_modules/left-pad").mkdir(parents=True)
        (data / "workspace/app/node_modules/left-pad/index.js").write_text(f"built on {worker}")
    (a_data / "workspace/.venv").write_text("a file of an excluded name")
    (a_data / "workspace/app/main.js").write_text("main")

    assert a.push(thread).transferred == ["workspace/app/main.js"]
    assert b.pull(thread).transferred == ["workspace/app/main.js"]
    # A stored object under an excluded name (pushed before the setting, or by another config) is not pulled.
    s3.put(a.prefix(thread) + "workspace/app/node_modules/stale.js", b"old")
    assert b.pull(thread).transferred == []
    # Rebuilding the excluded tree on one worker deletes nothing anywhere else.
    shutil.rmtree(a_data / "workspace/app/node_modules")
    assert (a.push(thread).transferred, a.push(thread).deleted) == ([], [])
    assert b.pull(thread).deleted == []
    assert (b_data / "workspace/app/node_modules/left-pad/index.js").read_text() == "built on b"
    assert s3.head(a.prefix(thread) + "workspace/app/node_modules/stale.js") is not None


def test_sync_exclude_takes_names_not_paths(tmp_path: Path) -> None:
    assert make_config(tmp_path, "unused:1", storage={"sync_exclude": ["node_modules"]}).storage.sync_exclude == [
        "node_modules"
    ]
    for bad in ("a/b", "..", ""):
        with pytest.raises(ValueError, match="not a file or directory name"):
            make_config(tmp_path, "unused:1", storage={"sync_exclude": [bad]})


def test_sync_never_leaves_the_thread_folders(
    tmp_path: Path, s3_server: S3Server, s3_bucket: str, s3_storage: dict[str, Any]
) -> None:
    files = _s3_files(s3_storage, tmp_path / "home")
    thread = ThreadRef("default", "t1")
    user_data = tmp_path / "home" / files.prefix(thread)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("host secret")
    (user_data / "workspace").mkdir(parents=True)
    (user_data / "workspace/secret-link.txt").symlink_to(outside / "secret.txt")
    (user_data / "workspace/escape").symlink_to(outside, target_is_directory=True)

    # push follows no symlink: neither the linked file nor the linked folder's contents are uploaded.
    assert files.push(thread).transferred == []
    assert list(files.store.list("")) == []

    # Objects whose keys would land outside the thread's folders are never written locally.
    raw = s3_server.client()
    bucket_prefix = s3_storage["s3"]["prefix"] + files.prefix(thread)
    raw.put_object(Bucket=s3_bucket, Key=bucket_prefix + "workspace/escape/planted.txt", Body=b"planted")
    raw.put_object(Bucket=s3_bucket, Key=bucket_prefix + "notes.txt", Body=b"not in a folder")
    raw.put_object(Bucket=s3_bucket, Key=bucket_prefix + "workspace/ok.txt", Body=b"fine")
    assert files.pull(thread).transferred == ["workspace/ok.txt"]
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert not (user_data / "notes.txt").exists()
    with pytest.raises(PathEscapeError):
        files.write(thread, "/mnt/user-data/workspace/escape/x.txt", b"x")


def test_listing_names_the_files_of_a_folder_in_storage(home: Path, storage: dict[str, Any]) -> None:
    files = _files(make_config(home, "unused:1", storage=storage))
    thread = ThreadRef("default", unique("t"))
    files.write(thread, "/mnt/user-data/outputs/report.md", b"# r\n")
    files.write(thread, "/mnt/user-data/outputs/charts/a.png", PNG)
    files.write(thread, "/mnt/user-data/uploads/in.txt", b"in")
    assert files.listing(thread, "outputs") == [
        ("/mnt/user-data/outputs/charts/a.png", len(PNG)),
        ("/mnt/user-data/outputs/report.md", 4),
    ]
    assert files.listing(ThreadRef("default", unique("t")), "outputs") == []


async def test_a_20mb_output_saved_on_one_worker_is_read_on_another(tmp_path: Path, s3_storage: dict[str, Any]) -> None:
    thread = ThreadRef("default", unique("t"))
    content = "".join(f"{i:09d}\n" for i in range(2_000_000))  # 20 MB
    path = f"{RESULTS}/{externalized_filename('bash', 'big', content)}"
    worker_a = _s3_files(s3_storage, tmp_path / "a")
    saved = ToolOutputActivities(worker_a).externalize(ExternalizeInput(thread, None, path, content))
    assert saved.saved
    stored = worker_a.store.head(worker_a.key(thread, path))
    assert stored is not None and stored.size == len(content)

    worker_b = _s3_files(s3_storage, tmp_path / "b")
    tools = ToolActivities(LocalSandboxProvider(tmp_path / "b"), files=worker_b)
    read = await tools.execute(
        ToolCallInput(thread, tool_call("read_file", path=path, start_line=1_500_000, end_line=1_500_001))
    )
    assert read.content == "001499999\n001500000"


# -- real runs on both backends ----------------------------------------------------------------------------------


async def test_an_upload_is_listed_and_readable_in_the_sandbox(
    client: Client, home: Path, tmp_path: Path, temporal_address: str, storage: dict[str, Any]
) -> None:
    config = make_config(home, temporal_address, storage=storage)
    thread = ThreadRef("default", unique("thread"))
    body = "# Summary\nSECRET BODY\n## Details\n"
    (tmp_path / "notes.md").write_text(body)
    store_uploads(open_object_store(config), thread, [tmp_path / "notes.md"])  # what `hartflow upload` does
    script = [calls(tool_call("read_file", "r1", path="/mnt/user-data/uploads/notes.md")), answer("read it")]
    async with running_worker(client, config):
        handle = await start_run(
            client,
            config,
            "summarise",
            model=write_script(home, script),
            thread_id=thread.thread_id,
            files=["notes.md"],
        )
        view = await settle(handle)
        [listed] = await _results(client, config, handle, UPLOADS_LIST, UploadsListResult)
        outputs = await _tool_outputs(client, config, handle)
    assert view.status == "completed"
    [upload] = listed.files
    assert (upload.filename, upload.size) == ("notes.md", len(body))
    assert [(entry.title, entry.line) for entry in upload.outline] == [("Summary", 1), ("Details", 3)]
    assert outputs == [body]


async def test_view_image_reads_an_uploaded_png(
    client: Client, home: Path, temporal_address: str, storage: dict[str, Any]
) -> None:
    config = make_config(home, temporal_address, storage=storage, run={"model_capabilities": {"vision": True}})
    thread = ThreadRef("default", unique("thread"))
    _files(config).write(thread, "/mnt/user-data/uploads/chart.png", PNG)
    script = [calls(tool_call("view_image", "v1", image_path="/mnt/user-data/uploads/chart.png")), answer("a chart")]
    async with running_worker(client, config):
        handle = await start_run(client, config, "look", model=write_script(home, script), thread_id=thread.thread_id)
        view = await settle(handle)
        [inspected] = await _results(client, config, handle, IMAGE_INSPECT, ImageInspectResult)
        [loaded] = await _results(client, config, handle, IMAGE_LOAD, ImageLoadResult)
    assert view.status == "completed"
    assert (inspected.error, inspected.mime_type, inspected.size) == (None, "image/png", len(PNG))
    assert inspected.actual_path == f"users/default/threads/{thread.thread_id}/user-data/uploads/chart.png"
    assert loaded.data_urls == [f"data:image/png;base64,{base64.b64encode(PNG).decode()}"]


async def test_what_tools_write_and_delete_reaches_the_storage(
    client: Client, home: Path, temporal_address: str, storage: dict[str, Any]
) -> None:
    config = make_config(home, temporal_address, storage=storage)
    thread = ThreadRef("default", unique("thread"))
    files = _files(config)
    files.write(thread, "/mnt/user-data/workspace/old.txt", b"stale")
    report = "/mnt/user-data/outputs/report.md"
    command = "cd /mnt/user-data && echo 42 > workspace/answer.txt && rm workspace/old.txt"
    script = [
        calls(tool_call("write_file", "w1", path=report, content="# Report\n")),
        calls(tool_call("bash", "b1", command=command)),
        calls(tool_call("read_file", "r1", path=report)),  # ReadBeforeWrite: modify only what was read
        calls(tool_call("str_replace", "s1", path=report, old_str="Report", new_str="Done")),
        answer("done"),
    ]
    async with running_worker(client, config):
        handle = await start_run(client, config, "work", model=write_script(home, script), thread_id=thread.thread_id)
        view = await settle(handle)
    assert view.status == "completed"
    assert files.read(thread, "/mnt/user-data/outputs/report.md") == b"# Done\n"
    assert files.read(thread, "/mnt/user-data/workspace/answer.txt") == b"42\n"
    assert files.read(thread, "/mnt/user-data/workspace/old.txt") is None
    if storage:  # the bucket holds exactly the thread's files: no manifest, no staging files
        assert sorted(info.key for info in files.store.list(files.prefix(thread))) == [
            files.key(thread, "/mnt/user-data/outputs/report.md"),
            files.key(thread, "/mnt/user-data/workspace/answer.txt"),
        ]


async def test_another_worker_with_another_home_continues_the_run(
    client: Client, tmp_path: Path, temporal_address: str, s3_storage: dict[str, Any]
) -> None:
    """Turn 1 on worker A writes files and an oversized output; A stops while the run waits for an answer;
    worker B (same task queue and bucket, its own empty home) continues and reads all of it."""
    config_a = make_config(tmp_path / "a", temporal_address, storage=s3_storage)
    config_b = config_a.model_copy(update={"storage": config_a.storage.model_copy(update={"home": tmp_path / "b"})})
    big = "".join(f"{i:09d}\n" for i in range(1_600))  # over ToolOutputBudget's threshold, under bash's cap
    saved = f"{RESULTS}/{externalized_filename('bash', 'b1', big)}"
    script = [
        calls(
            tool_call("write_file", "w1", path="/mnt/user-data/workspace/notes.txt", content="written on A"),
            tool_call("write_file", "w2", path="/mnt/user-data/workspace/scratch.txt", content="to delete"),
        ),
        calls(tool_call("bash", "b1", command="rm /mnt/user-data/workspace/scratch.txt; seq -f '%09g' 0 1599")),
        calls(tool_call("ask_clarification", "ask1", question="Go on?", clarification_type="approach_choice")),
        calls(
            tool_call("read_file", "r1", path="/mnt/user-data/workspace/notes.txt"),
            tool_call("read_file", "r2", path=saved, start_line=800, end_line=801),
            tool_call("ls", "l1", path="/mnt/user-data/workspace"),
        ),
        answer("done"),
    ]
    model = write_script(tmp_path, script)
    thread = unique("thread")
    async with running_worker(client, config_a):
        handle = await start_run(client, config_a, "work", model=model, thread_id=thread)
        assert (await settle(handle)).status == "awaiting_input"
    files_a = _files(config_a)
    assert files_a.store.exists(files_a.key(ThreadRef("default", thread), saved))
    assert not (tmp_path / "b").exists()

    async with running_worker(client, config_b):
        await handle.execute_update("reply", ReplyInput(answer="yes"), result_type=RunView)
        final = await handle.result()
        outputs = await _tool_outputs(client, config_b, handle)
    assert final.status == "completed"
    # The last turn's three calls ran in parallel: their results complete in any order.
    assert "written on A" in outputs[-3:] and "000000799\n000000800" in outputs[-3:]
    [listing] = [out for out in outputs[-3:] if "/mnt/user-data/workspace/notes.txt" in out]
    assert "scratch.txt" not in listing
    assert (tmp_path / "b" / f"users/default/threads/{thread}/user-data/workspace/notes.txt").is_file()


async def test_a_failed_command_still_pushes_what_it_wrote(tmp_path: Path, s3_storage: dict[str, Any]) -> None:
    files = _s3_files(s3_storage, tmp_path / "home")
    thread = ThreadRef("default", "t1")
    tools = ToolActivities(LocalSandboxProvider(tmp_path / "home", allow_host_bash=True), files=files)
    command = "echo partial > /mnt/user-data/outputs/partial.txt; exit 3"
    result = await tools.execute(ToolCallInput(thread, tool_call("bash", command=command)))
    assert result.content.endswith("Exit Code: 3")
    assert files.store.get(files.key(thread, "/mnt/user-data/outputs/partial.txt")) == b"partial\n"
