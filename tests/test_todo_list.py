"""TodoList (plan mode): ``write_todos`` and its reducer, the context-loss reminder, the completion guard (capped at
two per run) and the parallel-call rejection — as hook logic and on real runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from temporalio.client import Client

from activities.thread_store import FilesystemThreadStore
from middlewares.base import Command, ToolCallRequest, ToolResult
from middlewares.chain import build_lead_chain, describe
from middlewares.run_settings import RunSettings
from middlewares.todo_list import (
    PARALLEL_CALLS_ERROR,
    WRITE_TODOS_TOOL,
    TodoListMiddleware,
    context_loss_reminder,
    has_tool_intent,
)
from tests.support import StubRunContext, start_run
from vocabulary.contracts import ModelCallInput, ThreadRef
from vocabulary.state import ThreadState
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, unique, write_script
from workers.testing.history import history_events, scheduled_activities, scheduled_inputs

PLAN = {"run": {"plan_mode": True}}
TODOS = [{"content": "Draft", "status": "in_progress"}, {"content": "Review", "status": "pending"}]


def write_todos(todos: list[dict[str, Any]], call_id: str | None = None) -> dict[str, Any]:
    return tool_call("write_todos", call_id, todos=todos)


@pytest.mark.parametrize(
    ("message", "intent"),
    [
        (AIMessage("done"), False),
        (AIMessage("", tool_calls=[{"name": "ls", "args": {}, "id": "c1"}]), True),
        (AIMessage("", invalid_tool_calls=[{"name": "ls", "args": "{", "id": "c1", "error": "bad"}]), True),
        (AIMessage("", additional_kwargs={"tool_calls": [{"id": "c1"}]}), True),
        (AIMessage("", additional_kwargs={"function_call": {"name": "ls"}}), True),
        (AIMessage("", response_metadata={"finish_reason": "tool_calls"}), True),
        (AIMessage("x", response_metadata={"finish_reason": "stop"}), False),
    ],
)
def test_tool_intent_matrix(message: AIMessage, intent: bool) -> None:
    assert has_tool_intent(message) is intent


async def test_the_context_loss_reminder_rules() -> None:
    mw, ctx = TodoListMiddleware(), StubRunContext()
    base = [HumanMessage("plan it", id="h1"), AIMessage("ok", id="a1")]
    assert await mw.before_model(ThreadState(messages=base), ctx) is None, "no todos, no reminder"
    update = await mw.before_model(ThreadState(messages=base, todos=TODOS), ctx)
    assert update is not None
    [reminder] = update["messages"]
    assert reminder.name == "todo_reminder" and reminder.additional_kwargs == {"hide_from_ui": True}
    assert reminder.content == (
        "<system_reminder>\nYour todo list from earlier is no longer visible in the current context window, "
        "but it is still active. Here is the current state:\n\n- [in_progress] Draft\n- [pending] Review\n\n"
        "Continue tracking and updating this todo list as you work. Call `write_todos` whenever the status of "
        "any item changes.\n</system_reminder>"
    )
    # Still visible, or already reminded: nothing.
    visible = [*base, AIMessage("", tool_calls=[write_todos(TODOS, "w1")], id="a2")]
    assert await mw.before_model(ThreadState(messages=visible, todos=TODOS), ctx) is None
    reminded = [*base, context_loss_reminder(TODOS)]
    assert await mw.before_model(ThreadState(messages=reminded, todos=TODOS), ctx) is None


async def _call_tool(mw: TodoListMiddleware, state: ThreadState, call: dict[str, Any]) -> ToolResult:
    async def never(_: ToolCallRequest) -> ToolResult:
        raise AssertionError("write_todos must never reach the tool activity")

    return await mw.wrap_tool_call(ToolCallRequest(call, WRITE_TODOS_TOOL, state, StubRunContext()), never)


async def test_write_todos_is_a_state_update_and_bad_arguments_are_an_error() -> None:
    mw = TodoListMiddleware()
    call = write_todos(TODOS, "w1")
    result = await _call_tool(mw, ThreadState(messages=[AIMessage("", tool_calls=[call])]), call)
    assert isinstance(result, Command)
    assert result.update["todos"] == TODOS
    [message] = result.update["messages"]
    assert message.content == f"Updated todo list to {TODOS}"
    assert (message.tool_call_id, message.name, message.status) == ("w1", "write_todos", "success")

    bad = write_todos([{"content": "x", "status": "someday"}], "w2")
    result = await _call_tool(mw, ThreadState(messages=[AIMessage("", tool_calls=[bad])]), bad)
    assert isinstance(result, ToolMessage) and result.status == "error"
    assert result.content.startswith("Error invoking tool 'write_todos' with kwargs")


def test_write_todos_exists_only_in_plan_mode() -> None:
    assert "TodoList" not in describe(build_lead_chain(RunSettings()))
    chain = build_lead_chain(RunSettings(plan_mode=True))
    assert "TodoList" in describe(chain)
    assert [tool.name for mw in chain for tool in mw.tools()] == ["write_todos"]


# -- real runs ------------------------------------------------------------------------------------------------


async def test_the_completion_guard_sends_the_model_back_at_most_twice(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address, **PLAN)
    thread = unique("todo")
    model = write_script(
        home,
        [calls(write_todos(TODOS, "w1")), answer("early one"), answer("early two"), answer("final anyway")],
    )
    async with running_worker(client, config):
        handle = await start_run(client, config, "do the two steps", model=model, thread_id=thread)
        view = await settle(handle)
        events = await history_events(handle)
    assert view.status == "completed" and view.final_message == "final anyway"
    inputs = await scheduled_inputs(client, events, "model.invoke", ModelCallInput)
    assert len(inputs) == 4, "two reminders, then the answer is accepted"
    reminder = (
        "<system_reminder>\nYou have incomplete todo items that must be finished before giving your final response:"
        "\n\n- [in_progress] Draft\n- [pending] Review\n\nPlease continue working on these tasks. Call `write_todos` "
        "to mark items as completed as you finish them, and only respond when all items are done.\n</system_reminder>"
    )
    for index, request in enumerate(inputs):
        last = request.messages[-1]
        reminded = last.name == "todo_completion_reminder"
        assert reminded is (index >= 2), index
        if reminded:
            assert last.content == reminder and last.additional_kwargs == {"hide_from_ui": True}
        assert isinstance(request.system_message, SystemMessage)
        assert "<todo_list_system>" in request.system_message.content
        assert "write_todos" in [tool["function"]["name"] for tool in request.tools]
    assert len({request.system_message.content for request in inputs if request.system_message}) == 1

    state = FilesystemThreadStore(home).load(ThreadRef(config.user_id, thread)).state
    assert state.todos == TODOS
    assert [m.content for m in state.messages if isinstance(m, AIMessage) and not m.tool_calls] == [
        "early one",
        "early two",
        "final anyway",
    ], "rejected answers stay in the thread"
    assert not any(m.name == "todo_completion_reminder" for m in state.messages), "reminders are request-only"
    assert "tool.execute" not in [name for name, _ in scheduled_activities(events)], "write_todos is no activity"


async def test_parallel_write_todos_calls_are_all_rejected(client: Client, home: Path, temporal_address: str) -> None:
    config = make_config(home, temporal_address, **PLAN)
    thread = unique("todo")
    model = write_script(home, [calls(write_todos(TODOS, "w1"), write_todos(TODOS[:1], "w2")), answer("sorry")])
    async with running_worker(client, config):
        view = await settle(await start_run(client, config, "plan", model=model, thread_id=thread))
    assert view.status == "completed" and view.final_message == "sorry"
    state = FilesystemThreadStore(home).load(ThreadRef(config.user_id, thread)).state
    tool_messages = [m for m in state.messages if isinstance(m, ToolMessage)]
    assert [(m.tool_call_id, m.status, m.content) for m in tool_messages] == [
        ("w1", "error", PARALLEL_CALLS_ERROR),
        ("w2", "error", PARALLEL_CALLS_ERROR),
    ]
    assert state.todos is None


async def test_a_todo_list_that_left_the_context_is_reminded_once_and_kept(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address, **PLAN)
    thread = ThreadRef(config.user_id, unique("todo"))
    done = [{"content": "Draft", "status": "completed"}]
    store = FilesystemThreadStore(home)
    # A thread whose write_todos call was summarised away: the list is in state, the call is not.
    seeded = ThreadState(messages=[HumanMessage("earlier", id="h0"), AIMessage("ok", id="a0")], todos=done)
    store.commit(thread, seeded, expected_version=0, run_id="seed")
    model = write_script(home, [calls(tool_call("ls", path="/mnt/user-data/workspace")), answer("all done")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "anything left?", model=model, thread_id=thread.thread_id)
        view = await settle(handle)
        inputs = await scheduled_inputs(client, await history_events(handle), "model.invoke", ModelCallInput)
    assert view.status == "completed"
    for request in inputs:
        assert [m.name for m in request.messages].count("todo_reminder") == 1
    state = store.load(thread).state
    [reminder] = [m for m in state.messages if m.name == "todo_reminder"]
    assert "- [completed] Draft" in reminder.content and reminder.additional_kwargs["hide_from_ui"] is True
