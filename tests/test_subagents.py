"""Subagents on the real dev server: ``task`` calls become child workflows of the run (``HartflowSubagent``),
limited by SubagentLimit, answered as task ToolMessages, and cancelled with their parent."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.worker import Replayer

from middlewares.subagent_limit import LIMIT_REACHED_NOTICE
from tests.support import start_run, thread_state
from workers.testing import answer, calls, make_config, running_worker, tool_call, write_script
from workers.testing.history import history_events, scheduled_activities
from workers.worker import WORKFLOWS, workflow_runner
from workflows.run.delegation import SUBAGENT_WORKFLOW_NAME, child_workflow_id

CHILD_USAGE = {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10}


def task(call_id: str, prompt: str = "look into it", subagent_type: str = "general-purpose") -> dict[str, Any]:
    return tool_call("task", call_id, description=f"job {call_id}", prompt=prompt, subagent_type=subagent_type)


def child_answer(text: str) -> dict[str, Any]:
    return {**answer(text), "usage_metadata": CHILD_USAGE}


def subagent_config(home: Path, address: str, child_model: str, **subagents: Any) -> Any:
    return make_config(home, address, run={"subagent_enabled": True, "subagents": {"model": child_model, **subagents}})


def started_children(events: list[Any]) -> list[str]:
    return [
        e.start_child_workflow_execution_initiated_event_attributes.workflow_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
    ]


def child_started_events(events: list[Any]) -> list[Any]:
    return [e for e in events if e.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED]


def task_results(home: Path, thread_id: str) -> dict[str, dict[str, Any]]:
    messages = thread_state(home, thread_id)["messages"]
    return {m["tool_call_id"]: m for m in messages if m["type"] == "tool" and m.get("name") == "task"}


async def test_five_parallel_task_calls_run_three_child_workflows(
    client: Client, home: Path, temporal_address: str
) -> None:
    child_model = write_script(home, [child_answer("child report")])
    config = subagent_config(home, temporal_address, child_model)
    five = calls(*(task(f"t{i}") for i in range(5)), content="delegating")
    async with running_worker(client, config):
        handle = await start_run(
            client, config, "research five things", model=write_script(home, [five, answer("all done")])
        )
        view = await handle.result()
        events = await history_events(handle)
        children = started_children(events)
        child_histories = {cid: await history_events(client.get_workflow_handle(cid)) for cid in children}
        descriptions = {cid: await client.get_workflow_handle(cid).describe() for cid in children}
        summaries = {cid: await description.static_summary() for cid, description in descriptions.items()}
        progress = await handle.query("events", 0, result_type=list[dict[str, Any]])
        histories = [await handle.fetch_history(), await client.get_workflow_handle(children[0]).fetch_history()]

    assert view.status == "completed" and view.final_message == "all done"
    # Both workflows replay deterministically from their histories (the parent's include the child events).
    replayer = Replayer(
        workflows=list(WORKFLOWS), data_converter=client.data_converter, workflow_runner=workflow_runner()
    )
    for history in histories:
        await replayer.replay_workflow(history)
    expected = [child_workflow_id(handle.id, f"t{i}") for i in range(3)]
    assert sorted(children) == expected
    started = child_started_events(events)
    assert len(started) == 3
    assert {e.child_workflow_execution_started_event_attributes.workflow_type.name for e in started} == {
        SUBAGENT_WORKFLOW_NAME
    }
    for cid, child_events in child_histories.items():
        assert [name for name, _ in scheduled_activities(child_events)].count("model.invoke") == 1, cid
        assert "thread.commit" not in [name for name, _ in scheduled_activities(child_events)]
        description = descriptions[cid]
        assert description.status == WorkflowExecutionStatus.COMPLETED
        assert description.parent_id == handle.id
        assert summaries[cid] == f"subagent general-purpose · job {cid.rsplit('-', 1)[-1]}"

    finished = [(e["call_id"], e["status"]) for e in progress if e["kind"] == "subagent_finished"]
    assert sorted(finished) == [(f"t{i}", "completed") for i in range(3)]
    assert [e["dropped"] for e in progress if e["kind"] == "subagent_limit"] == [["t3", "t4"]]

    state = thread_state(home, view.thread_id)
    dispatch = next(m for m in state["messages"] if m["type"] == "ai" and m.get("tool_calls"))
    assert [c["id"] for c in dispatch["tool_calls"]] == ["t0", "t1", "t2"]
    # TokenUsage added the children's usage to the dispatching message.
    assert dispatch["usage_metadata"]["total_tokens"] >= 3 * CHILD_USAGE["total_tokens"]
    results = task_results(home, view.thread_id)
    assert sorted(results) == ["t0", "t1", "t2"]
    for result in results.values():
        assert result["content"] == "Task Succeeded. Result: child report"
        assert result["status"] == "success"
        assert result["additional_kwargs"]["subagent_status"] == "completed"
        assert result["additional_kwargs"]["subagent_token_usage"] == CHILD_USAGE
    assert [(d["id"], d["status"]) for d in state["delegations"]] == [(f"t{i}", "completed") for i in range(3)]


async def test_the_run_total_caps_delegation_across_turns(client: Client, home: Path, temporal_address: str) -> None:
    child_model = write_script(home, [child_answer("done")])
    config = subagent_config(home, temporal_address, child_model, max_total=2)
    script = [calls(task("a1"), task("a2")), calls(task("a3"), content="one more"), answer("unreachable")]
    async with running_worker(client, config):
        handle = await start_run(client, config, "go", model=write_script(home, script))
        view = await handle.result()
        children = started_children(await history_events(handle))

    assert sorted(children) == [child_workflow_id(handle.id, "a1"), child_workflow_id(handle.id, "a2")]
    assert view.status == "completed"
    assert view.stop_reason == "subagent_limit_capped"
    assert view.final_message == "one more\n\n" + LIMIT_REACHED_NOTICE
    assert sorted(task_results(home, view.thread_id)) == ["a1", "a2"]


async def test_failed_children_become_error_results_and_the_parent_completes(
    client: Client, home: Path, temporal_address: str
) -> None:
    # The child's model keeps calling tools: with one turn it ends at its turn limit without an answer.
    child_model = write_script(home, [calls(tool_call("ls", path="/mnt/user-data"))])
    config = subagent_config(home, temporal_address, child_model, types={"general-purpose": {"max_turns": 1}})
    script = [calls(task("capped"), task("empty", prompt=""), task("odd", subagent_type="nope")), answer("coped")]
    async with running_worker(client, config):
        handle = await start_run(client, config, "go", model=write_script(home, script))
        view = await handle.result()

    assert view.status == "completed" and view.final_message == "coped"
    results = task_results(home, view.thread_id)
    assert {cid: r["status"] for cid, r in results.items()} == {"capped": "error", "empty": "error", "odd": "error"}
    assert results["capped"]["content"] == (
        "Task failed (capped: turn budget). Error: The subagent ended without a final answer."
    )
    assert results["capped"]["additional_kwargs"]["subagent_stop_reason"] == "turn_capped"
    # A child workflow that fails goes through ToolErrorHandling's task-failure rule.
    # (an empty prompt is refused by the run's input check, so that child workflow fails)
    assert results["empty"]["content"] == (
        "Task failed. Error: BadInput: the message is empty. "
        "Continue with available context, or choose an alternative tool."
    )
    assert results["empty"]["additional_kwargs"]["subagent_status"] == "failed"
    assert results["odd"]["content"] == "Task failed. Error: Unknown subagent type 'nope'. Available: general-purpose"


async def test_a_child_past_its_timeout_is_a_timed_out_result(
    client: Client, home: Path, temporal_address: str
) -> None:
    never = home / "never-created"
    child_model = write_script(home, [{**answer("late"), "wait_for_file": str(never)}])
    config = subagent_config(home, temporal_address, child_model, timeout_seconds=2)
    async with running_worker(client, config):
        handle = await start_run(
            client, config, "go", model=write_script(home, [calls(task("slow")), answer("moved on")])
        )
        view = await handle.result()
        child = await client.get_workflow_handle(child_workflow_id(handle.id, "slow")).describe()

    assert view.status == "completed" and view.final_message == "moved on"
    assert child.status == WorkflowExecutionStatus.TIMED_OUT
    result = task_results(home, view.thread_id)["slow"]
    assert result["content"] == "Task timed out. Error: The subagent did not finish within 2 seconds."
    assert result["additional_kwargs"]["subagent_status"] == "timed_out"


async def _wait_for_children(handle: WorkflowHandle[Any, Any], count: int) -> list[str]:
    """Long-poll the parent's history until ``count`` children have started."""
    started: list[str] = []
    async for event in handle.fetch_history_events(wait_new_event=True):
        if event.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
            started.append(event.child_workflow_execution_started_event_attributes.workflow_execution.workflow_id)
            if len(started) == count:
                return started
    raise AssertionError("the parent closed before its children started")


async def test_cancelling_the_parent_cancels_its_running_children(
    client: Client, home: Path, temporal_address: str
) -> None:
    never = home / "never-created"
    child_model = write_script(home, [{**answer("never"), "wait_for_file": str(never)}])
    config = make_config(
        home,
        temporal_address,
        run={
            "subagent_enabled": True,
            "subagents": {"model": child_model},
            "extensions": ["tests.support.recording_middlewares:RecorderA"],
        },
    )
    async with running_worker(client, config):
        handle = await start_run(
            client, config, "go", model=write_script(home, [calls(task("c1"), task("c2"), task("c3")), answer("no")])
        )
        children = await asyncio.wait_for(_wait_for_children(handle, 3), timeout=60)
        details = (await handle.query("__temporal_workflow_metadata")).current_details
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        parent = await handle.describe()
        statuses = [(await client.get_workflow_handle(cid).describe()).status for cid in children]
        hooks = await handle.query("events", 0, result_type=list[dict[str, Any]])

    assert "**Subagents running:** job c1, job c2, job c3" in details
    assert parent.status == WorkflowExecutionStatus.CANCELED
    assert statuses == [WorkflowExecutionStatus.CANCELED] * 3
    assert ("A", "after_agent") in [(e.get("middleware"), e.get("hook")) for e in hooks]


async def test_a_sandbox_a_child_acquired_is_released_by_the_lead_run(
    client: Client, home: Path, temporal_address: str
) -> None:
    """The child shares the thread's sandbox and never releases it; it does not report the id either, so the lead
    run, which had none, releases by thread."""
    child_model = write_script(home, [calls(tool_call("bash", command="echo from the child")), answer("ran it")])
    config = subagent_config(home, temporal_address, child_model)
    async with running_worker(client, config):
        handle = await start_run(client, config, "go", model=write_script(home, [calls(task("t1")), answer("ok")]))
        view = await handle.result()
        parent = scheduled_activities(await history_events(handle))
        [child_id] = started_children(await history_events(handle))
        child = scheduled_activities(await history_events(client.get_workflow_handle(child_id)))
    assert view.status == "completed"
    assert ("tool.execute", "tool bash · echo from the child") in child
    assert [s for name, s in child if name == "sandbox.release"] == []
    assert [s for name, s in parent if name == "sandbox.release"] == ["Sandbox.after_agent · release (by thread)"]
