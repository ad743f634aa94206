"""No run's code ever acts for another run (issue 13), on the real dev server.

A worker that stops keeps the runs it cached unless they are evicted (``workers/worker_stop.py``); a garbage
collection later closes such an orphan by throwing ``GeneratorExit`` into it, on whatever thread collects. Inside
another run's activation, an orphan that swallowed it would issue its commands in that other run's history and
really execute them. These tests pause a run, stop its worker, collect inside another run's activation, and
check that every history holds only its own run's commands and replays; and that a worker whose cache holds one
run at a time (every answer forces an eviction) loses nothing of any run.
"""

from __future__ import annotations

import gc
import json
import logging
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from tests.conftest import _WorkflowTaskFailures
from tests.support import start_run, thread_state
from vocabulary.contracts import (
    RUN_CLOSE,
    THREAD_COMMIT,
    THREAD_LOAD,
    RunCloseInput,
    ThreadCommitInput,
    ThreadLoadInput,
)
from workers.devserver import free_port
from workers.payloads import client_for
from workers.stack import Stack
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, unique, write_script
from workers.testing.history import history_events, replay, scheduled_activities, scheduled_inputs
from workers.worker import build_worker
from workers.worker_stop import cached_runs, running
from workflows.run import ReplyInput, RunView, RunWorkflow

COLLECT_GARBAGE = "tests.orphan_middlewares:CollectGarbage"


def _ask(call_id: str) -> dict[str, Any]:
    return calls(tool_call("ask_clarification", call_id, question="Which colour?", clarification_type="missing_info"))


@pytest.fixture
def collections_only_where_the_test_runs_them() -> Iterator[None]:
    """No automatic collection: an orphan stays in memory until the collection the test runs inside a run's
    activation, instead of being closed at a random allocation (the reproduction is deterministic).

    What earlier tests of this process left is collected first, here, and other libraries' gc callbacks
    (hypothesis registers one) are set aside: the collection inside an activation then meets only this test's
    objects, instead of running their finalizers in the workflow sandbox, or for seconds under the deadlock
    detector."""
    gc.collect()
    # What survived is frozen out of every later collection: a collection inside an activation then walks only
    # what this test allocated, not the whole heap of a process that ran hundreds of tests (walking that took
    # longer than the SDK's 2 s deadlock timeout on a loaded machine, failing the run's task on every attempt).
    gc.freeze()
    callbacks = list(gc.callbacks)
    gc.callbacks.clear()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.callbacks.extend(callbacks)
        gc.unfreeze()
        if was_enabled:
            gc.enable()


def _live_run_coroutines(workflow_id: str) -> list[Any]:
    """The suspended ``RunWorkflow.run`` coroutines of ``workflow_id`` still in memory. ``type(o)``, not
    ``isinstance``: the heap also holds the workflow sandbox's restricted module proxies, whose ``__class__``
    refuses access."""
    return [
        o
        for o in gc.get_objects()
        if type(o) is types.CoroutineType
        and o.cr_code is RunWorkflow.run.__code__
        and o.cr_frame is not None
        and o.cr_frame.f_locals["self"]._ctx.workflow_id == workflow_id
    ]


async def _threads_named(client: Client, events: list[Any]) -> set[str]:
    """Every thread the run's thread.load, thread.commit and run.close activities named: the inputs of the
    scheduled ones, the result of a local load (a local activity's input is not in history; its result names the
    thread)."""
    loads = await scheduled_inputs(client, events, THREAD_LOAD, ThreadLoadInput)
    commits = await scheduled_inputs(client, events, THREAD_COMMIT, ThreadCommitInput)
    closes: list[RunCloseInput] = await scheduled_inputs(client, events, RUN_CLOSE.name, RunCloseInput)
    named = {item.thread.thread_id for item in [*loads, *commits]}
    named |= {close.archive.thread.thread_id for close in closes}
    named |= {close.commit.thread.thread_id for close in closes if close.commit is not None}
    for event in events:
        attributes = event.marker_recorded_event_attributes
        if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED or attributes.marker_name != "core_local_activity":
            continue
        if json.loads(attributes.details["data"].payloads[0].data)["activity_type"] == THREAD_LOAD:
            named.add(json.loads(attributes.details["result"].payloads[0].data)["thread"]["thread_id"])
    return named


def _failed_tasks(events: list[Any]) -> list[str]:
    """The failure message of every workflow task the run failed (a nondeterminism error is one)."""
    failed = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
    return [e.workflow_task_failed_event_attributes.failure.message for e in failed]


def _answered(home: Path, thread_id: str, reply: str, final: str) -> bool:
    messages = thread_state(home, thread_id)["messages"]
    responses = [m["additional_kwargs"].get("human_input_response") for m in messages if m["type"] == "human"]
    answers = [r.get("value") for r in responses if r]
    return answers == [reply] and messages[-1]["type"] == "ai" and messages[-1]["content"] == final


def test_the_suite_sees_failed_activations_and_errors_of_workflow_code() -> None:
    """tests/conftest.py fails a test on these records of ``temporalio.worker._workflow_instance``; its other
    warnings pass."""
    handler = _WorkflowTaskFailures()
    records = [
        {"levelno": logging.WARNING, "msg": "Failed activation", "__temporal_error_identifier": "WorkflowTaskFailure"},
        {"levelno": logging.ERROR, "msg": "Exception in default exception handler"},
        {"levelno": logging.WARNING, "msg": "Workflow X has unfinished handlers"},
    ]
    for record in records:
        handler.handle(logging.makeLogRecord(record))
    assert [r.getMessage() for r in handler.records] == ["Failed activation", "Exception in default exception handler"]


async def test_a_stopped_worker_leaves_no_cached_run_and_no_run_coroutine(
    client: Client, home: Path, temporal_address: str, collections_only_where_the_test_runs_them: None
) -> None:
    config = make_config(home, temporal_address)
    worker: Worker = build_worker(client_for(client, config), config)
    async with running(worker):
        handle = await start_run(client, config, "go", model=write_script(home, [_ask("ask1"), answer("blue")]))
        assert (await settle(handle)).status == "awaiting_input"
        assert cached_runs(worker) == [(await handle.describe()).run_id]
        assert len(_live_run_coroutines(handle.id)) == 1, "paused: its coroutine waits for the reply"

    assert cached_runs(worker) == []
    assert _live_run_coroutines(handle.id) == [], "the paused run's coroutine ended with its worker"


async def test_the_embedded_stack_leaves_no_cached_run_when_its_command_ends(
    home: Path, collections_only_where_the_test_runs_them: None
) -> None:
    config = make_config(home, "unused", temporal={"address": None, "embedded_port": free_port(), "task_queue": "tq"})
    async with Stack(config, ui=False, quiet=True) as stack:
        assert stack.embedded and stack.worker is not None
        worker = stack.worker
        handle = await start_run(
            client_for(stack.client, config), config, "go", model=write_script(home, [_ask("ask1"), answer("x")])
        )
        assert (await settle(handle)).status == "awaiting_input"
        assert cached_runs(worker) != []

    assert cached_runs(worker) == []
    assert _live_run_coroutines(handle.id) == []


async def test_an_orphan_collected_inside_another_run_acts_for_nobody(
    client: Client, home: Path, temporal_address: str, collections_only_where_the_test_runs_them: None
) -> None:
    config = make_config(home, temporal_address)
    collecting = make_config(
        home,
        temporal_address,
        run={"extensions": [COLLECT_GARBAGE]},
        temporal={"address": temporal_address, "task_queue": config.temporal.task_queue},
    )
    paused_thread, other_thread = unique("paused"), unique("other")

    # Worker A: the run pauses for clarification, then A stops (as every test module and in-process stack does).
    async with running_worker(client, config):
        paused = await start_run(
            client,
            config,
            "go",
            model=write_script(home, [_ask("ask1"), answer("blue it is")]),
            thread_id=paused_thread,
        )
        assert (await settle(paused)).status == "awaiting_input"

    # Worker B: another run collects garbage inside its own activation; then the paused run is answered.
    async with running_worker(client, config):
        other = await start_run(
            client, collecting, "hello", model=write_script(home, [answer("hi")]), thread_id=other_thread
        )
        assert (await other.result()).status == "completed"
        await paused.execute_update("reply", ReplyInput(answer="blue"), result_type=RunView)
        final = await paused.result()
        other_events = await history_events(other)
        paused_events = await history_events(paused)
        await replay(client, other)
        await replay(client, paused)

    assert await _threads_named(client, other_events) == {other_thread}, "only the other run's own commands"
    assert _failed_tasks(other_events) == _failed_tasks(paused_events) == []
    assert [name for name, _ in scheduled_activities(other_events)].count(RUN_CLOSE.name) == 1, "one final commit"
    assert (final.status, final.final_message) == ("completed", "blue it is")
    assert _answered(home, paused_thread, "blue", "blue it is"), "the reply and the answer are stored"


async def test_evictions_from_one_run_caches_lose_nothing(
    client: Client, home: Path, temporal_address: str, collections_only_where_the_test_runs_them: None
) -> None:
    """Runs pause on a worker whose cache holds one run, so each new run evicts the one paused before it; that
    worker stops; another one-run worker answers them in turn, each answer bringing its run back from history and
    evicting the previous one, while every model turn collects garbage inside its own activation."""
    config = make_config(home, temporal_address, run={"extensions": [COLLECT_GARBAGE]})
    runs: list[tuple[str, WorkflowHandle[Any, RunView]]] = []
    async with running_worker(client, config, max_cached_workflows=1):
        for index in range(3):
            thread = unique(f"evicted-{index}")
            model = write_script(
                home, [_ask(f"ask-{index}"), calls(tool_call("ls", path="/mnt/user-data")), answer(f"done {index}")]
            )
            handle = await start_run(client, config, f"run {index}", model=model, thread_id=thread)
            assert (await settle(handle)).status == "awaiting_input"
            runs.append((thread, handle))
    async with running_worker(client, config, max_cached_workflows=1):
        finals = []
        for index, (_, handle) in enumerate(runs):
            await handle.execute_update("reply", ReplyInput(answer=f"colour {index}"), result_type=RunView)
            finals.append(await handle.result())
        for _, handle in runs:
            await replay(client, handle)

    assert [(f.status, f.final_message) for f in finals] == [("completed", f"done {i}") for i in range(3)]
    for index, (thread, handle) in enumerate(runs):
        assert _answered(home, thread, f"colour {index}", f"done {index}")
        tools = [m["name"] for m in thread_state(home, thread)["messages"] if m["type"] == "tool"]
        assert tools == ["ask_clarification", "ls"], "every step the run took is in its committed state"
        events = await history_events(handle)
        assert await _threads_named(client, events) == {thread}
        assert _failed_tasks(events) == [], "no workflow task failed (a stray command fails one)"
