"""The ordering contract, pinned on real runs: before_* in list order, after_* reversed, first wrap outermost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from temporalio.client import Client

from middlewares.chain import build_lead_chain, describe
from tests.support import sole_thread_state, start_run
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, write_script
from workers.testing.history import history_events, scheduled_activities

RECORDERS = [f"tests.support.recording_middlewares:Recorder{x}" for x in "ABC"]


async def _hook_events(handle: Any) -> list[tuple[str, str, str]]:
    events = await handle.query("events", 0, result_type=list[dict[str, Any]])
    return [(e["middleware"], e["hook"], e["phase"]) for e in events if e["kind"] == "hook"]


async def test_hooks_dispatch_in_deerflow_order(client: Client, home: Path, temporal_address: str) -> None:
    config = make_config(home, temporal_address, run={"extensions": RECORDERS})
    model = write_script(home, [calls(tool_call("ls", path="/mnt/user-data")), answer("done")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "list the files", model=model)
        view = await settle(handle)
        hooks = await _hook_events(handle)
    assert view.status == "completed"
    assert view.final_message == "done"

    def phase(hook: str, turn_slice: slice = slice(None)) -> list[str]:
        return [f"{m}{':' + p if p else ''}" for m, h, p in hooks if h == hook][turn_slice]

    assert phase("before_agent") == ["A", "B", "C"]
    assert phase("before_model") == ["A", "B", "C", "A", "B", "C"]
    assert phase("after_model") == ["C", "B", "A", "C", "B", "A"]
    assert phase("after_agent") == ["C", "B", "A"]
    # First middleware is the outermost wrapper: A enters first and exits last, for models and tools alike.
    nested = ["A:enter", "B:enter", "C:enter", "C:exit", "B:exit", "A:exit"]
    assert phase("wrap_model_call") == nested * 2
    assert phase("wrap_tool_call") == nested
    # The whole run, in sequence: the agent phase brackets the loop.
    assert hooks[0][1] == "before_agent" and hooks[-1][1] == "after_agent"


async def test_status_query_exposes_the_chain(client: Client, home: Path, temporal_address: str) -> None:
    config = make_config(home, temporal_address, run={"extensions": RECORDERS[:2]})
    model = write_script(home, [answer("hi")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "hello", model=model)
        await settle(handle)
        chain = await handle.query("chain", result_type=list[str])
    # Extensions sit after LoopDetection and before TerminalResponse, ModelLengthFinishReason, SafetyFinishReason and
    # Clarification (DeerFlow's 28, 31, 32-35).
    assert chain[-7:] == [
        "LoopDetection",
        "RecorderA",
        "RecorderB",
        "TerminalResponse",
        "ModelLengthFinishReason",
        "SafetyFinishReason",
        "Clarification",
    ]
    assert chain == describe(build_lead_chain(config.run))


async def test_after_model_jump_to_model_skips_the_tools(client: Client, home: Path, temporal_address: str) -> None:
    extensions = ["tests.support.recording_middlewares:JumpBackOnce"]
    config = make_config(home, temporal_address, run={"extensions": extensions})
    model = write_script(
        home,
        [calls(tool_call("write_file", path="/mnt/user-data/workspace/x", content="x")), answer("second")],
    )
    async with running_worker(client, config):
        handle = await start_run(client, config, "go", model=model)
        view = await settle(handle)
        activities = scheduled_activities(await history_events(handle))
    assert view.status == "completed" and view.final_message == "second"
    assert [name for name, _ in activities].count("model.invoke") == 2
    assert "tool.execute" not in [name for name, _ in activities]
    assert not list(home.glob("users/*/threads/*/user-data/workspace/x"))


async def test_wrap_model_call_can_short_circuit_the_model(client: Client, home: Path, temporal_address: str) -> None:
    extensions = ["tests.support.recording_middlewares:ShortCircuitModel"]
    config = make_config(home, temporal_address, run={"extensions": extensions})
    model = write_script(home, [])  # an empty script: any real model call would fail the run
    async with running_worker(client, config):
        handle = await start_run(client, config, "hi", model=model)
        view = await settle(handle)
        activities = scheduled_activities(await history_events(handle))
    assert view.status == "completed"
    assert view.final_message == "answered by middleware"
    assert "model.invoke" not in [name for name, _ in activities]


async def test_parallel_tool_calls_are_scheduled_together_and_merged_in_call_order(
    client: Client, home: Path, temporal_address: str
) -> None:
    extensions = ["tests.support.recording_middlewares:TagToolResults"]
    # Without ReadBeforeWrite's hash before each write, the writes themselves are the first activities.
    run = {"extensions": extensions, "middlewares": {"read_before_write": {"enabled": False}}}
    config = make_config(home, temporal_address, run=run)
    files = [f"/mnt/user-data/workspace/f{i}.txt" for i in range(3)]
    model = write_script(
        home,
        [
            calls(*(tool_call("write_file", f"c{i}", path=p, content=str(i)) for i, p in enumerate(files))),
            answer("wrote three"),
        ],
    )
    async with running_worker(client, config):
        handle = await start_run(client, config, "write", model=model)
        view = await settle(handle)
        events = await history_events(handle)
    assert view.status == "completed"
    kinds = [e.event_type for e in events]
    from temporalio.api.enums.v1 import EventType

    tool_scheduled = [
        i
        for i, e in enumerate(events)
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "tool.execute"
    ]
    first_completed = next(
        i for i in range(tool_scheduled[0], len(kinds)) if kinds[i] == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    )
    assert len(tool_scheduled) == 3
    assert all(i < first_completed for i in tool_scheduled), "the three tool calls must be in flight together"
    state = sole_thread_state(home)
    tool_ids = [m["tool_call_id"] for m in state["messages"] if m["type"] == "tool"]
    assert tool_ids == ["c0", "c1", "c2"]
    assert state["artifacts"] == ["/tagged/c0", "/tagged/c1", "/tagged/c2"]
