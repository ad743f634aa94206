"""TokenUsage: DeerFlow's step attribution (todo diffs, kinds), subagent usage merged once, and a real run whose
status shows the run's token totals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from temporalio.client import Client

from activities.thread_store import FilesystemThreadStore
from middlewares.token_usage import TokenUsageMiddleware, attribution, todo_actions
from tests.support import StubRunContext, start_run
from vocabulary.contracts import ThreadRef
from vocabulary.state import ThreadState, apply_update
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, unique, write_script


def _todo(content: str, status: str) -> dict[str, str]:
    return {"content": content, "status": status}


@pytest.mark.parametrize(
    ("previous", "current", "actions"),
    [
        ([], [_todo("A", "in_progress"), _todo("B", "pending")], [("todo_start", "A"), ("todo_update", "B")]),
        ([_todo("A", "in_progress")], [_todo("A", "completed")], [("todo_complete", "A")]),
        ([_todo("A", "pending")], [_todo("A", "pending")], []),
        ([_todo("A", "pending")], [_todo("A2", "pending")], [("todo_update", "A2")]),  # renamed in place
        ([_todo("A", "pending"), _todo("B", "pending")], [_todo("B", "pending")], [("todo_remove", "A")]),
        # New content at a position falls back to the todo that was there (DeerFlow's positional match).
        (
            [_todo("A", "completed")],
            [_todo("C", "in_progress"), _todo("A", "completed")],
            [("todo_update", "C"), ("todo_complete", "A")],
        ),
    ],
)
def test_todo_diff(
    previous: list[dict[str, str]], current: list[dict[str, str]], actions: list[tuple[str, str]]
) -> None:
    assert [(a["kind"], a["content"]) for a in todo_actions(previous, current)] == actions


def _ai(content: str = "", *calls_: dict[str, Any]) -> AIMessage:
    return AIMessage(content, tool_calls=list(calls_), id="a1")


@pytest.mark.parametrize(
    ("message", "kind", "actions"),
    [
        (_ai("Here it is."), "final_answer", []),
        (_ai(""), "thinking", []),
        (
            _ai("", tool_call("write_todos", "w", todos=[_todo("A", "in_progress")])),
            "todo_update",
            [{"kind": "todo_start", "content": "A", "tool_call_id": "w"}],
        ),
        (
            _ai("", tool_call("task", "t", description=" research ", subagent_type="general-purpose")),
            "subagent_dispatch",
            [{"kind": "subagent", "description": "research", "subagent_type": "general-purpose", "tool_call_id": "t"}],
        ),
        (
            _ai("", tool_call("web_search", "s", query="q"), tool_call("bash", "b", command="ls", description="list")),
            "tool_batch",
            [
                {"kind": "search", "tool_name": "web_search", "query": "q", "tool_call_id": "s"},
                {"kind": "tool", "tool_name": "bash", "description": "list", "tool_call_id": "b"},
            ],
        ),
        (
            _ai("", tool_call("ask_clarification", "c", question="?")),
            "tool_batch",
            [{"kind": "clarification", "tool_call_id": "c"}],
        ),
        (
            _ai("", tool_call("write_todos", "w", todos=[])),  # no change to a missing list: a plain tool step
            "tool_batch",
            [{"kind": "tool", "tool_name": "write_todos", "tool_call_id": "w"}],
        ),
    ],
)
def test_attribution(message: AIMessage, kind: str, actions: list[dict[str, Any]]) -> None:
    stamp = attribution(message, [])
    assert stamp == {
        "version": 1,
        "kind": kind,
        "shared_attribution": len(actions) > 1,
        "tool_call_ids": [c["id"] for c in message.tool_calls],
        "actions": actions,
    }


async def test_subagent_usage_is_added_to_the_dispatching_message_once() -> None:
    usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    dispatch = AIMessage(
        "",
        tool_calls=[tool_call("task", "t1", description="d"), tool_call("task", "t2", description="e")],
        usage_metadata=usage,
        id="a1",
    )
    reports = [
        ToolMessage("r1", tool_call_id="t1", id="m1", additional_kwargs={"subagent_token_usage": usage}),
        ToolMessage("r2", tool_call_id="t2", id="m2", additional_kwargs={"subagent_token_usage": usage}),
    ]
    ctx = StubRunContext()
    mw = TokenUsageMiddleware()
    state = ThreadState(messages=[HumanMessage("go", id="h"), dispatch, *reports, AIMessage("done", id="a2")])
    state = apply_update(state, await mw.after_model(state, ctx), new_id=ctx.uuid)
    assert state.messages[1].usage_metadata == {"input_tokens": 30, "output_tokens": 15, "total_tokens": 45}
    assert all(m.additional_kwargs["subagent_token_usage_attributed"] for m in state.messages[2:4])
    assert mw.usage() == {"input_tokens": 20, "output_tokens": 10, "total_tokens": 30}
    # Looking again (a replayed hook, a later step) adds nothing.
    again = await mw.after_model(state, ctx)
    assert again is None
    assert mw.usage() == {"input_tokens": 20, "output_tokens": 10, "total_tokens": 30}


async def test_a_run_reports_its_token_totals_and_stamps_each_step(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    thread = unique("usage")
    listing = calls(tool_call("ls", "l1", path="/mnt/user-data/workspace", description="look around"))
    listing["usage_metadata"] = {"input_tokens": 100, "output_tokens": 20}
    final = answer("done") | {"usage_metadata": {"input_tokens": 130, "output_tokens": 8}}
    async with running_worker(client, config):
        view = await settle(
            await start_run(client, config, "hi", model=write_script(home, [listing, final]), thread_id=thread)
        )
    assert view.status == "completed"
    assert view.usage == {"input_tokens": 230, "output_tokens": 28, "total_tokens": 258}
    state = FilesystemThreadStore(home).load(ThreadRef(config.user_id, thread)).state
    stamps = [m.additional_kwargs["token_usage_attribution"] for m in state.messages if isinstance(m, AIMessage)]
    assert [s["kind"] for s in stamps] == ["tool_batch", "final_answer"]
    assert stamps[0]["actions"] == [
        {"kind": "tool", "tool_name": "ls", "description": "look around", "tool_call_id": "l1"}
    ]


async def test_without_token_usage_there_are_no_totals(client: Client, home: Path, temporal_address: str) -> None:
    config = make_config(home, temporal_address, run={"middlewares": {"token_usage": {"enabled": False}}})
    final = answer("done") | {"usage_metadata": {"input_tokens": 1, "output_tokens": 1}}
    async with running_worker(client, config):
        view = await settle(await start_run(client, config, "hi", model=write_script(home, [final])))
    assert view.status == "completed" and view.usage is None
