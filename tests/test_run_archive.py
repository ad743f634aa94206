"""The run archive: a closed run's final view and its whole workflow stream (every topic, global offsets), stored
by its last activity on either backend and read back without a worker (``activities/run_archive.py``)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowQueryRejectedError
from temporalio.contrib.workflow_streams import WorkflowStreamClient, WorkflowStreamState
from temporalio.contrib.workflow_streams._types import _WorkflowStreamWireItem
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError

from activities.run_archive import load_run_archive, read_run_archive, run_archive_key, store_run_archive
from activities.storage.filesystem import FilesystemObjectStore
from middlewares.chain import build_lead_chain, describe
from tests.support import start_run
from vocabulary.contracts import RUN_CLOSE, RunArchiveInput, ThreadRef
from workers.config import HartflowConfig, open_object_store
from workers.progress import follow
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, write_script
from workers.testing.history import history_events, scheduled_activities
from workers.worker import connect
from workflows.run import PROGRESS_TOPIC, ReplyInput
from workflows.run.archive import PART_BUDGET_CHARS, _slices
from workflows.run.state_stream import MESSAGES_TOPIC

_ASK = calls(tool_call("ask_clarification", "ask1", question="Which colour?", clarification_type="missing_info"))


@pytest.fixture(params=["filesystem", "s3"])
def backend_config(request: pytest.FixtureRequest, home: Path, temporal_address: str) -> HartflowConfig:
    storage: dict[str, Any] = request.getfixturevalue("s3_storage") if request.param == "s3" else {}
    return make_config(home, temporal_address, storage=storage)


async def test_a_closed_run_leaves_its_view_and_every_stream_topic(
    client: Client, backend_config: HartflowConfig, tmp_path: Path
) -> None:
    config = backend_config
    model = write_script(tmp_path, [_ASK, calls(tool_call("ls", path="/mnt/user-data")), answer("blue it is")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "pick a colour", model=model)
        assert (await settle(handle)).status == "awaiting_input"
        # Another publisher's topic on the same stream (the API server adds its own): the archive keeps it too.
        stream = WorkflowStreamClient.create(client, handle.id)
        stream.topic("notes", type=dict).publish({"note": "from outside"}, force_flush=True)
        await stream.flush()
        await handle.execute_update("reply", ReplyInput(answer="blue"))
        view = await handle.result()
        live = [item async for item in stream.subscribe(from_offset=0, result_type=dict[str, Any])]
    assert view.status == "completed"
    assert view.chain == describe(build_lead_chain(config.run))

    archive = await load_run_archive(open_object_store(config), config.user_id, view.thread_id, view.run_id)
    assert archive is not None
    assert (archive.thread_id, archive.run_id, archive.workflow_id) == (view.thread_id, view.run_id, handle.id)
    assert archive.view["status"] == "completed"
    assert archive.view["final_message"] == "blue it is"
    assert archive.view["chain"] == view.chain
    assert archive.version == 2  # the pause's commit, then the final one
    # Exactly the stream a live subscriber read: all topics, the stream's own offsets, in order.
    assert [(e.offset, e.topic, e.data) for e in archive.events] == [(i.offset, i.topic, i.data) for i in live]
    assert [e.offset for e in archive.events] == list(range(len(archive.events)))
    assert {e.topic for e in archive.events} == {PROGRESS_TOPIC, MESSAGES_TOPIC, "notes"}
    progress = archive.topic(PROGRESS_TOPIC)
    seqs = [e.data["seq"] for e in progress]
    assert seqs == sorted(set(seqs))
    kinds = [e.data["kind"] for e in progress]
    assert kinds[-1] == "run_finished" and progress[-1].data["status"] == "completed"
    assert "awaiting_input" in kinds and "tool_result" in kinds
    assert [e.data for e in archive.topic("notes")] == [{"note": "from outside"}]
    # The archive is the run's last activity, with its final commit (``tests/test_run_close.py``).
    assert [name for name, _ in scheduled_activities(await history_events(handle))][-1] == RUN_CLOSE.name


async def test_a_cancelled_run_is_archived_as_cancelled(client: Client, config: HartflowConfig, tmp_path: Path) -> None:
    model = write_script(tmp_path, [_ASK])
    async with running_worker(client, config):
        handle = await start_run(client, config, "pick a colour", model=model)
        view = await settle(handle)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
    archive = read_run_archive(open_object_store(config), config.user_id, view.thread_id, view.run_id)
    assert archive is not None
    assert archive.view["status"] == "cancelled"
    assert archive.view["pending_input"] is None
    assert archive.topic(PROGRESS_TOPIC)[-1].data["status"] == "cancelled"


def test_no_archive_is_none_and_ids_cannot_leave_the_thread(home: Path) -> None:
    objects = FilesystemObjectStore(home)
    assert read_run_archive(objects, "default", "t1", "0198-abc") is None
    for bad in ("../x", "a/b", "", ".hidden"):
        with pytest.raises(ValueError):
            run_archive_key("default", "t1", bad)


def test_a_retried_archive_succeeds_and_a_different_one_is_a_conflict(home: Path) -> None:
    objects = FilesystemObjectStore(home)
    converter = DataConverter.default.payload_converter
    archive = RunArchiveInput(
        ThreadRef("default", "t1"), "run-1", "hartflow-t1", {"status": "completed"}, WorkflowStreamState(), 1
    )
    key = store_run_archive(objects, archive, converter)
    stored = objects.get(key)
    assert store_run_archive(objects, archive, converter) == key  # a retry: same bytes, success
    archive.view = {"status": "error"}
    with pytest.raises(ApplicationError) as refused:
        store_run_archive(objects, archive, converter)
    assert refused.value.type == "RunArchiveConflict"
    assert objects.get(key) == stored


def _stream(sizes: list[int], converter: Any, base_offset: int = 0) -> WorkflowStreamState:
    """A stream whose items carry strings of ``sizes`` characters, in the wire form the workflow keeps."""
    log = [
        _WorkflowStreamWireItem(
            "messages", base64.b64encode(converter.to_payload("x" * size).SerializeToString()).decode(), base_offset + i
        )
        for i, size in enumerate(sizes)
    ]
    return WorkflowStreamState(log=log, base_offset=base_offset)


def test_a_stream_too_large_for_one_input_is_archived_in_parts_and_read_whole(home: Path) -> None:
    """A run whose messages carry tens of MB (every topic holds them) would make one run.archive input exceed the
    payload limit, and its workflow task fail forever: it goes in parts, each under the budget, offsets kept."""
    converter = DataConverter.default.payload_converter
    stream = _stream([6_000_000, 6_000_000, 9_000_000, 100, 7_000_000], converter, base_offset=3)
    slices = _slices(stream, reserve=1_000)
    assert len(slices) > 1
    assert [item for piece in slices for item in piece.log] == stream.log
    starts = [3 + sum(len(p.log) for p in slices[:i]) for i in range(len(slices))]
    assert [piece.base_offset for piece in slices] == starts
    for piece in slices:
        assert sum(len(i.data) for i in piece.log) + 1_000 <= PART_BUDGET_CHARS or len(piece.log) == 1
    assert _slices(_stream([10, 20], converter), reserve=5) == [_stream([10, 20], converter)]

    objects = FilesystemObjectStore(home)
    thread = ThreadRef("default", "t1")
    for part, piece in enumerate(slices):
        view = {"status": "completed"} if part == len(slices) - 1 else {}
        store_run_archive(objects, RunArchiveInput(thread, "run-1", "w", view, piece, 2, part, len(slices)), converter)
    archive = read_run_archive(objects, "default", "t1", "run-1")
    assert archive is not None and archive.view == {"status": "completed"}
    assert [(e.offset, len(e.data)) for e in archive.events] == [
        (3 + i, size) for i, size in enumerate([6_000_000, 6_000_000, 9_000_000, 100, 7_000_000])
    ]


async def test_following_a_closed_run_reads_its_archive_and_no_worker_is_asked(
    client: Client, config: HartflowConfig, tmp_path: Path
) -> None:
    model = write_script(tmp_path, [calls(tool_call("ls", path="/mnt/user-data")), answer("done")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "look around", model=model)
        view = await handle.result()
    # No worker polls any more: a replaying query would hang; hartflow's client is refused at once instead.
    hartflow_client = await connect(config, client.service_client.config.target_host)
    archive = read_run_archive(open_object_store(config), config.user_id, view.thread_id, view.run_id)
    assert archive is not None
    with pytest.raises(WorkflowQueryRejectedError):
        await hartflow_client.get_workflow_handle(handle.id).query("status")

    async def archived(offset: int) -> list[Any]:
        assert archive is not None
        return archive.topic(PROGRESS_TOPIC, from_offset=offset)

    shown: list[dict[str, Any]] = []
    await follow(hartflow_client, handle.id, shown.append, offset=1, archived=archived)
    assert shown == [event.data for event in archive.topic(PROGRESS_TOPIC, from_offset=1)]
    assert shown[-1]["kind"] == "run_finished"
