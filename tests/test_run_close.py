"""A run's end in one activity (``run.close``: ``activities/run_close.py``, ``workflows/run/finish.py``): the final
commit, then the archive with the committed version, and the ``run_finished`` event held back until both are
stored, so no client learns that a run finished before its state can be read."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from temporalio import activity
from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStreamClient, WorkflowStreamState
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.run_archive import RunArchiveActivities, read_run_archive, run_archive_key
from activities.run_close import RunCloseActivities
from activities.storage.filesystem import FilesystemObjectStore
from activities.thread_store import ObjectThreadStore, ThreadStoreActivities
from middlewares.context import RunEvents
from tests.support import start_run
from vocabulary.contracts import (
    RUN_CLOSE,
    HeldItem,
    RunArchiveInput,
    RunCloseInput,
    RunCloseResult,
    ThreadCommitInput,
    ThreadRef,
)
from vocabulary.state import ThreadState
from workers.config import HartflowConfig, open_object_store
from workers.testing import answer, calls, running_worker, tool_call, write_script
from workers.testing.history import history_events, replay, scheduled_activities
from workers.worker import activities as worker_activities
from workflows.run import PROGRESS_TOPIC, RunView

_THREAD = ThreadRef("default", "t1")
_FINISHED = {"seq": 0, "kind": "run_finished", "type": "run_finished", "at": "2026-12-03T00:00:00", "status": "ok"}


def _close_input(state: ThreadState) -> RunCloseInput:
    """A first commit of ``state`` and an archive with no stream items but the held ``run_finished``."""
    commit = ThreadCommitInput(_THREAD, state, 0, "run-1")
    view = {"status": "completed"}
    archive = RunArchiveInput(
        _THREAD, "run-1", "hartflow-t1", view, WorkflowStreamState(), 0, held=HeldItem(PROGRESS_TOPIC, _FINISHED)
    )
    return RunCloseInput(commit, archive)


def _activities(home: Path) -> tuple[RunCloseActivities, FilesystemObjectStore, ObjectThreadStore]:
    objects = FilesystemObjectStore(home)
    threads = ObjectThreadStore(objects)
    return RunCloseActivities(ThreadStoreActivities(threads), RunArchiveActivities(objects)), objects, threads


def test_the_close_commits_then_archives_with_the_committed_version_and_the_held_event(home: Path) -> None:
    closing, objects, threads = _activities(home)
    state = ThreadState(messages=[HumanMessage("hi", id="h1"), AIMessage("hello", id="a1")])
    env = ActivityEnvironment()
    result = env.run(closing.close, _close_input(state))
    assert result == RunCloseResult(version=1)
    assert threads.load(_THREAD).state == state
    archive = read_run_archive(objects, "default", "t1", "run-1")
    assert archive is not None and archive.version == 1
    assert [(e.offset, e.topic, e.data) for e in archive.events] == [(0, PROGRESS_TOPIC, _FINISHED)]
    # A retried attempt (its first answer lost) commits the same state again and stores the same bytes: success.
    assert env.run(closing.close, _close_input(state)) == RunCloseResult(version=1)


def test_an_archive_that_cannot_be_stored_leaves_the_commit_standing(home: Path) -> None:
    closing, objects, threads = _activities(home)
    objects.put(run_archive_key("default", "t1", "run-1"), b'{"another": "archive"}')
    state = ThreadState(messages=[HumanMessage("hi", id="h1")])
    result = ActivityEnvironment().run(closing.close, _close_input(state))
    assert result.version == 1
    assert result.archive_error is not None and result.archive_error.startswith("RunArchiveConflict")
    assert threads.load(_THREAD).version == 1


def test_a_commit_that_conflicts_fails_the_close_and_archives_nothing(home: Path) -> None:
    closing, objects, threads = _activities(home)
    threads.commit(_THREAD, ThreadState(messages=[HumanMessage("first", id="h0")]), expected_version=0, run_id="run-0")
    with pytest.raises(ApplicationError) as failed:
        ActivityEnvironment().run(closing.close, _close_input(ThreadState(messages=[HumanMessage("hi", id="h1")])))
    assert failed.value.type == "ThreadConflict" and failed.value.non_retryable
    assert read_run_archive(objects, "default", "t1", "run-1") is None


def test_events_added_while_one_is_held_wait_behind_it() -> None:
    published: list[tuple[int, str]] = []
    events = RunEvents(5, publish=lambda event: published.append((event.seq, event.kind)))
    events.add("tool_result", lambda: "t0", {})
    held = events.hold("run_finished", lambda: "t1", {})
    events.add("resumed", lambda: "t2", {})
    assert held.seq == 6 and published == [(5, "tool_result")]
    assert [event.kind for event in events.items] == ["tool_result"]
    events.release()
    assert published == [(5, "tool_result"), (6, "run_finished"), (7, "resumed")]
    assert [(event.seq, event.at) for event in events.items] == [(5, "t0"), (6, "t1"), (7, "t2")]


async def test_no_client_sees_run_finished_before_the_close_is_stored(
    client: Client, config: HartflowConfig, tmp_path: Path
) -> None:
    """``run.close`` held at its start: the run's events (what the ``events`` query and the stream show) end before
    ``run_finished`` while the commit is not stored; once it is, the event is published where the archive has it."""
    started, go_on = threading.Event(), threading.Event()
    served = worker_activities(config, open_object_store(config))
    real_close = next(fn for fn in served if getattr(fn, "__temporal_activity_definition").name == RUN_CLOSE.name)

    @activity.defn(name=RUN_CLOSE.name)
    def held_close(input: RunCloseInput) -> RunCloseResult:
        started.set()
        go_on.wait(timeout=60)
        result: RunCloseResult = real_close(input)
        return result

    others = [fn for fn in served if fn is not real_close]
    model = write_script(tmp_path, [calls(tool_call("ls", path="/mnt/user-data")), answer("done")])
    async with running_worker(client, config, activities=[*others, held_close]):
        handle = await start_run(client, config, "look around", model=model)
        try:
            assert await asyncio.to_thread(started.wait, 60)
            kinds = [event["kind"] for event in await handle.query("events")]
            assert kinds[-1] == "model_call" and "run_finished" not in kinds  # the answer's call was the last
            assert (await handle.query("status", result_type=RunView)).status == "running"
        finally:
            go_on.set()
        view = await handle.result()
        live = [item async for item in WorkflowStreamClient.create(client, handle.id).subscribe(from_offset=0)]
        await replay(client, handle)
    assert view.status == "completed"
    assert [name for name, _ in scheduled_activities(await history_events(handle))][-1] == RUN_CLOSE.name
    archive = read_run_archive(open_object_store(config), config.user_id, view.thread_id, view.run_id)
    assert archive is not None and archive.version == 1
    assert [(e.offset, e.topic, e.data) for e in archive.events] == [(i.offset, i.topic, i.data) for i in live]
    assert archive.events[-1].data["kind"] == "run_finished"
