"""LoopDetection: identical call sets and per-tool frequency, warnings injected request-only at the next model
call, forced stops that rewrite the AIMessage; plus a real run that is warned at 3 and stopped at 5."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from pydantic import ValidationError
from temporalio.client import Client

from middlewares.base import ModelRequest
from middlewares.loop_detection import (
    HARD_STOP_TEXT,
    WARNING_TEXT,
    LoopDetectionConfig,
    LoopDetectionMiddleware,
    hash_typed_calls,
    typed_tool_calls,
)
from tests.support import StubRunContext, start_run, thread_state
from vocabulary.contracts import MODEL_INVOKE, ModelCallInput
from vocabulary.state import ThreadState
from workers.testing import answer, calls, make_config, running_worker, tool_call, write_script
from workers.testing.history import history_events, scheduled_activities, scheduled_inputs


def _call(name: str, call_id: str = "c", **args: Any) -> dict[str, Any]:
    return {"name": name, "id": call_id, "args": args}


def _hash(*tool_calls: dict[str, Any]) -> str:
    return hash_typed_calls(typed_tool_calls(list(tool_calls)))


async def _after(mw: LoopDetectionMiddleware, ctx: StubRunContext, *tool_calls: dict[str, Any], **extra: Any) -> Any:
    message = AIMessage(content=extra.pop("content", ""), tool_calls=list(tool_calls), id="ai-1", **extra)
    return await mw.after_model(ThreadState(messages=[message]), ctx)


async def _next_request(mw: LoopDetectionMiddleware, messages: list[BaseMessage]) -> list[BaseMessage]:
    seen: list[list[BaseMessage]] = []

    async def model(request: ModelRequest) -> AIMessage:
        seen.append(request.messages)
        return AIMessage("ok")

    ctx = StubRunContext()
    await mw.wrap_model_call(ModelRequest(messages, None, [], ThreadState(), ctx, "m"), model)
    return seen[0]


# -- the call-set key ---------------------------------------------------------------------------------------


def test_the_hash_ignores_order_ids_and_non_salient_args() -> None:
    ls = _call("ls", "a", path="/x", description="first look")
    grep = _call("grep", "b", path="/x", pattern="foo")
    assert _hash(ls, grep) == _hash(grep, _call("ls", "z", path="/x", description="another look"))
    assert _hash(grep) != _hash(_call("grep", path="/x", pattern="bar"))
    assert _hash(_call("glob", path="/x", pattern="*.py")) != _hash(_call("glob", path="/x", pattern="*.ts"))
    assert len(_hash(ls)) == 12


def test_read_file_ranges_fall_into_200_line_buckets() -> None:
    def read(start: Any, end: Any) -> str:
        return _hash(_call("read_file", path="/a.py", start_line=start, end_line=end))

    assert read(1, 150) == read(10, 200) == read(200, 1)
    assert read(1, 150) != read(1, 201)
    assert read("1", "150") == read(1, 150)
    assert read(None, None) == read(1, 1) == read("x", None)
    dict_args = {"name": "read_file", "args": {"path": "/a.py", "start_line": "1", "end_line": "150"}}
    string_args = {"name": "read_file", "args": '{"path":"/a.py","start_line":"1","end_line":"150"}'}
    assert _hash(dict_args) == _hash(string_args)


def test_content_sensitive_tools_hash_every_argument() -> None:
    assert _hash(_call("write_file", path="/a", content="v1")) != _hash(_call("write_file", path="/a", content="v2"))
    a = _call("str_replace", path="/a", old_str="x", new_str="y")
    assert _hash(a) != _hash(_call("str_replace", path="/a", old_str="x", new_str="z"))
    # Without salient fields, every argument counts; odd args never crash.
    assert _hash(_call("web_fetch", what="a")) != _hash(_call("web_fetch", what="b"))
    assert _hash({"name": "bash", "args": "echo hi"}) != _hash({"name": "bash", "args": '"echo hi"'})


def test_the_config_keeps_deerflows_defaults_and_refuses_inverted_limits() -> None:
    config = LoopDetectionConfig()
    assert (config.warn_threshold, config.hard_limit, config.window_size) == (3, 5, 20)
    assert (config.tool_freq_warn, config.tool_freq_hard_limit, config.tool_freq_overrides) == (30, 50, {})
    for bad in (
        {"warn_threshold": 5, "hard_limit": 4},
        {"tool_freq_warn": 10, "tool_freq_hard_limit": 9},
        {"tool_freq_overrides": {"bash": {"warn": 3, "hard_limit": 2}}},
        {"max_tracked_threads": 100},
    ):
        with pytest.raises(ValidationError):
            LoopDetectionConfig.model_validate(bad)


# -- layer 1: identical call sets ----------------------------------------------------------------------------


async def test_the_third_repeat_queues_one_warning_and_the_next_request_carries_it() -> None:
    mw, ctx = LoopDetectionMiddleware(), StubRunContext()
    call = _call("bash", command="ls")
    assert await _after(mw, ctx, call) is None
    assert await _after(mw, ctx, call) is None
    # The third: detection leaves the AIMessage alone (its tool results do not exist yet) and queues.
    assert await _after(mw, ctx, call) is None
    assert await _after(mw, ctx, call) is None, "warned once per hash"
    assert [e.kind for e in ctx.events] == ["loop_warning"]

    history: list[BaseMessage] = [AIMessage("", tool_calls=[call], id="a"), ToolMessage("ok", tool_call_id="c")]
    sent = await _next_request(mw, history)
    assert sent[:2] == history, "the pairing of calls and results is untouched"
    assert isinstance(sent[2], HumanMessage) and sent[2].name == "loop_warning"
    assert sent[2].content == WARNING_TEXT
    assert await _next_request(mw, history) == history, "a warning is delivered once"


async def test_the_fifth_repeat_forces_a_stop_that_clears_structured_and_raw_tool_calls() -> None:
    mw, ctx = LoopDetectionMiddleware(), StubRunContext()
    call = _call("bash", "call_ls", command="ls")
    raw = {
        "tool_calls": [{"id": "call_ls", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
        "function_call": {"name": "bash", "arguments": "{}"},
        "keep": 1,
    }
    for _ in range(4):
        assert await _after(mw, ctx, call) is None
    update = await _after(
        mw, ctx, call, content="thinking…", additional_kwargs=raw, response_metadata={"finish_reason": "tool_calls"}
    )
    [stopped] = update["messages"]
    assert isinstance(stopped, AIMessage) and stopped.id == "ai-1"
    assert stopped.tool_calls == []
    assert stopped.additional_kwargs == {"keep": 1}
    assert stopped.response_metadata["finish_reason"] == "stop"
    assert stopped.content == f"thinking…\n\n{HARD_STOP_TEXT}"
    assert ctx.stop_reason == "loop_capped"
    assert ctx.events[-1].kind == "loop_forced_stop"


async def test_list_content_gets_a_text_block_on_a_forced_stop() -> None:
    mw, ctx = LoopDetectionMiddleware(LoopDetectionConfig(warn_threshold=1, hard_limit=1)), StubRunContext()
    blocks = [{"type": "thinking", "thinking": "hmm"}]
    update = await _after(mw, ctx, _call("ls", path="/"), content=blocks)
    assert update["messages"][0].content == [*blocks, {"type": "text", "text": f"\n\n{HARD_STOP_TEXT}"}]


async def test_repeats_that_leave_the_window_are_forgotten() -> None:
    mw, ctx = LoopDetectionMiddleware(LoopDetectionConfig(window_size=5)), StubRunContext()
    call = _call("bash", command="ls")
    await _after(mw, ctx, call)
    await _after(mw, ctx, call)
    for i in range(5):
        await _after(mw, ctx, _call("bash", command=f"other {i}"))
    assert await _after(mw, ctx, call) is None
    assert ctx.events == []


# -- layer 2: one tool, many times ----------------------------------------------------------------------------


async def test_one_tool_with_varying_arguments_is_warned_then_stopped() -> None:
    config = LoopDetectionConfig(tool_freq_warn=3, tool_freq_hard_limit=5)
    mw, ctx = LoopDetectionMiddleware(config), StubRunContext()
    for i in range(2):
        await _after(mw, ctx, _call("read_file", path=f"/f{i}.py"))
    assert await _after(mw, ctx, _call("read_file", path="/f2.py")) is None
    assert await _after(mw, ctx, _call("read_file", path="/f3.py")) is None
    sent = await _next_request(mw, [])
    assert [m.content for m in sent] == [
        "[LOOP DETECTED] You have called read_file 3 times without producing a final answer. Stop calling tools "
        "and produce your final answer now. If you cannot complete the task, summarize what you accomplished so far."
    ]
    update = await _after(mw, ctx, _call("read_file", path="/f4.py"))
    assert update["messages"][0].content == (
        "\n\n[FORCED STOP] Tool read_file called 5 times — exceeded the per-tool safety limit. "
        "Producing final answer with results collected so far."
    )
    assert ctx.stop_reason == "loop_capped"


async def test_every_call_of_a_response_counts_and_tools_are_counted_apart() -> None:
    mw, ctx = LoopDetectionMiddleware(LoopDetectionConfig(tool_freq_warn=4, tool_freq_hard_limit=10)), StubRunContext()
    await _after(mw, ctx, _call("read_file", "a", path="/a"), _call("read_file", "b", path="/b"))
    await _after(mw, ctx, _call("bash", command="x"), _call("bash", "d", command="y"), _call("bash", "e", command="z"))
    assert ctx.events == []
    await _after(mw, ctx, _call("read_file", path="/c"), _call("read_file", "d", path="/d"))
    assert [e.data["message"].split(" times")[0] for e in ctx.events] == ["[LOOP DETECTED] You have called read_file 4"]


async def test_overrides_replace_the_global_frequency_limits_and_stretch_the_window() -> None:
    config = LoopDetectionConfig(
        window_size=3,
        tool_freq_warn=2,
        tool_freq_hard_limit=3,
        tool_freq_overrides={"bash": {"warn": 6, "hard_limit": 8}},
    )
    mw, ctx = LoopDetectionMiddleware(config), StubRunContext()
    for i in range(7):
        assert await _after(mw, ctx, _call("bash", command=f"cmd {i}")) is None
    assert [e.kind for e in ctx.events] == ["loop_warning"]
    # The window holds 8 calls (the largest hard limit), not window_size=3: the eighth call is caught.
    assert (await _after(mw, ctx, _call("bash", command="cmd 7"))) is not None
    assert ctx.stop_reason == "loop_capped"


async def test_a_frequency_warning_repeats_only_after_the_count_decays() -> None:
    config = LoopDetectionConfig(window_size=1, tool_freq_warn=2, tool_freq_hard_limit=4)
    mw, ctx = LoopDetectionMiddleware(config), StubRunContext()
    # The frequency window is 4 calls: two ls warn, other tools push them out, two ls warn again.
    sequence = ["ls", "ls", "grep", "glob", "bash", "write_file", "ls", "ls"]
    for i, name in enumerate(sequence):
        await _after(mw, ctx, _call(name, path=f"/p{i}", command=str(i), pattern=str(i), content=str(i)))
    assert [e.data["message"][:42] for e in ctx.events] == ["[LOOP DETECTED] You have called ls 2 times"] * 2


async def test_memory_survives_continue_as_new() -> None:
    mw, ctx = LoopDetectionMiddleware(), StubRunContext()
    call = _call("bash", command="ls")
    for _ in range(3):
        await _after(mw, ctx, call)
    memory = json.loads(json.dumps(mw.export_memory()))
    continued = LoopDetectionMiddleware()
    continued.import_memory(memory)
    assert [m.content for m in await _next_request(continued, [])] == [WARNING_TEXT]
    await _after(continued, ctx, call)
    assert (await _after(continued, ctx, call)) is not None, "the fifth repeat counts the ones before the restart"


# -- on a real run -------------------------------------------------------------------------------------------


async def test_a_run_repeating_one_call_is_warned_at_3_and_stopped_at_5(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    repeat = [calls(tool_call("ls", f"ls{i}", path="/mnt/user-data")) for i in range(5)]
    model = write_script(home, [*repeat, answer("never reached")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "look around", model=model)
        final = await handle.result()
        events = await history_events(handle)
        requests = [
            r for r in await scheduled_inputs(client, events, MODEL_INVOKE, ModelCallInput) if r.purpose == "agent"
        ]
        progress = await handle.query("events", 0, result_type=list[dict[str, Any]])
    assert final.status == "completed" and final.stop_reason == "loop_capped"
    assert final.final_message == f"\n\n{HARD_STOP_TEXT}"
    assert [name for name, _ in scheduled_activities(events)].count("tool.execute") == 4

    assert len(requests) == 5
    warnings = [[m for m in r.messages if getattr(m, "name", None) == "loop_warning"] for r in requests]
    assert [len(w) for w in warnings] == [0, 0, 0, 1, 0]
    fourth = requests[3].messages
    assert isinstance(fourth[-2], ToolMessage) and fourth[-2].tool_call_id == "ls2"
    assert isinstance(fourth[-1], HumanMessage) and fourth[-1].content == WARNING_TEXT
    assert [e["kind"] for e in progress if e["kind"].startswith("loop_")] == ["loop_warning", "loop_forced_stop"]

    state = thread_state(home, final.thread_id)
    assert not [m for m in state["messages"] if m.get("name") == "loop_warning"], "warnings are request-only"
    last = state["messages"][-1]
    assert last["type"] == "ai" and last["tool_calls"] == []
    assert last["content"] == f"\n\n{HARD_STOP_TEXT}"
    assert last["response_metadata"]["finish_reason"] == "stop"
