"""The run workflow on a real server: limits, one run per thread, the clarification pause, cancellation,
continue-as-new."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import WorkflowAlreadyStartedError

from tests.support import start_run, thread_state
from workers.testing import (
    answer,
    ask_clarification,
    calls,
    make_config,
    running_worker,
    settle,
    tool_call,
    unique,
    write_script,
)
from workers.testing.history import history_events, scheduled_activities
from workflows.run import ReplyInput, RunView


def _state(home: Path, thread_id: str) -> dict[str, Any]:
    return thread_state(home, thread_id)


async def test_recursion_limit_ends_the_run_with_a_stop_reason(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address, run={"recursion_limit": 2})
    loop = [calls(tool_call("ls", path="/mnt/user-data")) for _ in range(5)]
    async with running_worker(client, config):
        handle = await start_run(client, config, "loop forever", model=write_script(home, loop))
        view = await handle.result()
        activities = [name for name, _ in scheduled_activities(await history_events(handle))]
    assert view.status == "completed"
    assert view.stop_reason == "recursion_limit"
    assert activities.count("model.invoke") == 2


async def test_a_second_run_on_a_busy_thread_is_refused(client: Client, home: Path, temporal_address: str) -> None:
    config = make_config(home, temporal_address)
    model = write_script(home, [ask_clarification(), answer("ok")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "paint it", model=model)
        view = await settle(handle)
        assert view.status == "awaiting_input"
        with pytest.raises(WorkflowAlreadyStartedError):
            await start_run(client, config, "again", model=model, thread_id=view.thread_id)
        await handle.execute_update("reply", ReplyInput(answer="blue"), result_type=RunView)
        assert (await handle.result()).status == "completed"


async def test_clarification_pauses_commits_and_resumes_the_same_run(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    model = write_script(home, [ask_clarification(options=["red", "blue"]), answer("Painted it blue.")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "paint it", model=model)
        view = await settle(handle)
        assert view.status == "awaiting_input"
        request = await handle.query("pending_input", result_type=dict[str, Any])
        assert request["request_id"] == "clarification:ask1"
        assert [o["label"] for o in request["options"]] == ["red", "blue"]
        # Committed before the wait: nothing is lost if the wait is long or the worker dies.
        committed = _state(home, view.thread_id)["messages"]
        assert committed[-1]["type"] == "tool" and committed[-1]["id"] == "clarification:ask1"
        assert committed[-1]["artifact"]["human_input"]["kind"] == "human_input_request"

        await handle.execute_update("reply", ReplyInput(option_id="option-2"), result_type=RunView)
        final = await handle.result()
    assert final.status == "completed" and final.final_message == "Painted it blue."
    assert final.run_id == view.run_id
    reply = _state(home, view.thread_id)["messages"][-2]
    assert reply["type"] == "human"
    assert reply["additional_kwargs"]["hide_from_ui"] is True
    assert reply["additional_kwargs"]["human_input_response"] == {
        "version": 1,
        "kind": "human_input_response",
        "source": "ask_clarification",
        "request_id": "clarification:ask1",
        "response_kind": "option",
        "value": "blue",
        "option_id": "option-2",
    }


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (ReplyInput(answer="   "), "the answer is empty"),
        (ReplyInput(option_id="option-9"), "unknown option 'option-9'"),
        (ReplyInput(answer="x", request_id="clarification:old"), "stale request_id"),
    ],
)
async def test_invalid_replies_are_rejected_without_a_trace_in_history(
    client: Client, home: Path, temporal_address: str, reply: ReplyInput, error: str
) -> None:
    config = make_config(home, temporal_address)
    model = write_script(home, [ask_clarification(options=["red", "blue"]), answer("done")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "paint it", model=model)
        await settle(handle)
        before = len(await history_events(handle))
        with pytest.raises(WorkflowUpdateFailedError) as failure:
            await handle.execute_update("reply", reply, result_type=RunView)
        assert error in str(failure.value.cause)
        assert len(await history_events(handle)) == before
        assert (await handle.query("status", result_type=RunView)).status == "awaiting_input"
        await handle.execute_update("reply", ReplyInput(answer="red"), result_type=RunView)
        assert (await handle.result()).status == "completed"


async def test_signal_replies_accept_a_bare_string_and_drop_malformed_payloads(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    model = write_script(home, [ask_clarification(), answer("done")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "paint it", model=model)
        await settle(handle)
        await handle.signal("clarification_reply", 42)
        await handle.signal("clarification_reply", {"answer": "x", "colour": "y"})
        # Still waiting, and the workflow task did not fail: a query answers and says why.
        view = await handle.query("status", result_type=RunView)
        assert view.status == "awaiting_input"
        metadata = await handle.query("__temporal_workflow_metadata")
        assert "ignored a clarification_reply signal" in metadata.current_details
        await handle.signal("clarification_reply", "green")
        final = await handle.result()
        events = await history_events(handle)
    assert final.status == "completed"
    assert not [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
    assert _state(home, final.thread_id)["messages"][-2]["content"] == (
        'For your clarification "Which colour?", my answer is: green'
    )


async def test_other_tool_calls_of_the_turn_run_before_the_pause(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    turn = calls(
        tool_call("write_file", "w1", path="/mnt/user-data/workspace/a.txt", content="a"),
        tool_call("ask_clarification", "ask1", question="More?", clarification_type="missing_info"),
    )
    async with running_worker(client, config):
        handle = await start_run(client, config, "go", model=write_script(home, [turn, answer("done")]))
        view = await settle(handle)
        assert view.status == "awaiting_input"
        committed = _state(home, view.thread_id)["messages"]
        assert [m.get("tool_call_id") for m in committed if m["type"] == "tool"] == ["w1", "ask1"]
        assert next(home.glob("users/default/threads/*/user-data/workspace/a.txt")).read_text() == "a"
        await handle.signal("clarification_reply", "no")
        assert (await handle.result()).status == "completed"


async def test_non_interactive_runs_get_the_disabled_message_and_go_on(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address, run={"non_interactive": True})
    async with running_worker(client, config):
        model = write_script(home, [ask_clarification(), answer("went on")])
        handle = await start_run(client, config, "go", model=model)
        final = await handle.result()
    assert final.status == "completed" and final.final_message == "went on"
    tool = next(m for m in _state(home, final.thread_id)["messages"] if m["type"] == "tool")
    assert tool["content"].startswith("Clarification is disabled in this context")


async def test_cancelling_a_paused_run_still_runs_after_agent_and_commits(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address, run={"extensions": ["tests.support.recording_middlewares:RecorderA"]})
    async with running_worker(client, config):
        handle = await start_run(client, config, "go", model=write_script(home, [ask_clarification(), answer("never")]))
        view = await settle(handle)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        events = await handle.query("events", 0, result_type=list[dict[str, Any]])
        activities = [name for name, _ in scheduled_activities(await history_events(handle))]
    assert ("A", "after_agent") in [(e.get("middleware"), e.get("hook")) for e in events]
    # Before the pause, and in the finally path (with the archive: run.close).
    assert (activities.count("thread.commit"), activities.count("run.close")) == (1, 1)
    assert _state(home, view.thread_id)["messages"][-1]["id"] == "clarification:ask1"


async def test_long_runs_continue_as_new_and_keep_everything(client: Client, home: Path, temporal_address: str) -> None:
    config = make_config(home, temporal_address)
    turns = 16  # ~12 history events per turn: past the server's continue-as-new suggestion
    script = [
        calls(tool_call("bash", f"c{i}", command=f"echo {i} >> /mnt/user-data/workspace/n")) for i in range(turns)
    ]
    async with running_worker(client, config):
        handle = await start_run(client, config, "count", model=write_script(home, [*script, answer("counted")]))
        final = await handle.result()
        description = await client.get_workflow_handle(handle.id).describe()
    assert final.status == "completed" and final.final_message == "counted"
    assert description.run_id != final.run_id, "the run should have continued as new at least once"
    assert final.turns == turns + 1
    messages = [m for m in _state(home, final.thread_id)["messages"] if m["type"] != "system"]
    assert len(messages) == 1 + 2 * turns + 1  # the user message, a call and a result per turn, the answer
    numbers = next(home.glob("users/default/threads/*/user-data/workspace/n")).read_text().split()
    assert numbers == [str(i) for i in range(turns)]


async def test_settle_and_reply_race_cleanly(client: Client, home: Path, temporal_address: str) -> None:
    """A client that replies and immediately waits must not see the stale awaiting_input status."""
    config = make_config(home, temporal_address)
    model = write_script(home, [ask_clarification(), calls(tool_call("ls", path="/mnt/user-data")), answer("done")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "go", model=model, thread_id=unique("race"))
        await settle(handle)
        await handle.execute_update("reply", ReplyInput(answer="yes"), result_type=RunView)
        settled = await asyncio.wait_for(settle(handle), timeout=60)
    assert settled.status == "completed"
