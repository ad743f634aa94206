"""The end of a turn as DeerFlow shapes it: ModelLengthFinishReason, TerminalResponse, SystemMessageCoalescing and
SubagentDateContext (``bytedance/deer-flow: backend/tests/test_model_length_finish_reason_middleware.py``,
``test_terminal_response_middleware.py``, ``test_system_message_coalescing_middleware.py``), unit by unit and in
real runs whose scripted model shows what it received."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage
from temporalio.client import Client

from middlewares.base import ModelRequest
from middlewares.dynamic_context import date_reminder
from middlewares.model_length_finish_reason import ModelLengthFinishReasonMiddleware, detect_length_cap
from middlewares.subagent_date_context import SubagentDateContextMiddleware
from middlewares.system_message_coalescing import coalesce
from middlewares.terminal_response import (
    FALLBACK_CONTENT,
    RECOVERY_PROMPT,
    TerminalResponseMiddleware,
    tool_result_in_current_turn,
)
from tests.support import StubRunContext, sole_thread_state, start_run
from vocabulary.contracts import ModelCallInput
from vocabulary.state import ThreadState
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, write_script
from workers.testing.history import history_events, scheduled_inputs

# -- ModelLengthFinishReason -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "detector"),
    [
        ({"finish_reason": "length"}, "openai_compatible_length"),
        ({"finish_reason": "LENGTH"}, "openai_compatible_length"),
        ({"stop_reason": "max_tokens"}, "anthropic_max_tokens"),
        ({"finish_reason": "MAX_TOKENS"}, "gemini_max_tokens"),
        ({"finish_reason": "max_tokens"}, "gemini_max_tokens"),
        ({"finish_reason": "stop"}, None),
        ({"stop_reason": "end_turn"}, None),
    ],
)
def test_length_signals_of_each_provider(metadata: dict[str, str], detector: str | None) -> None:
    hit = detect_length_cap(AIMessage("partial", response_metadata=metadata))
    assert (hit.detector if hit else None) == detector
    legacy = detect_length_cap(AIMessage("partial", additional_kwargs=metadata))
    assert (legacy.detector if legacy else None) == detector


async def _length_stop(message: AIMessage, ctx: StubRunContext | None = None) -> str | None:
    ctx = ctx or StubRunContext()
    state = ThreadState(messages=[HumanMessage("write"), message])
    assert await ModelLengthFinishReasonMiddleware().after_model(state, ctx) is None, "the message is never changed"
    return ctx.stop_reason


async def test_only_a_terminal_answer_with_text_is_marked_capped() -> None:
    capped = {"finish_reason": "length"}
    assert await _length_stop(AIMessage("half a report", response_metadata=capped)) == "model_length_capped"
    assert await _length_stop(AIMessage("   ", response_metadata=capped)) is None
    with_call = AIMessage("x", tool_calls=[{"name": "ls", "args": {}, "id": "c"}], response_metadata=capped)
    assert await _length_stop(with_call) is None
    raw = AIMessage("x", additional_kwargs={"function_call": {"name": "ls"}}, response_metadata=capped)
    assert await _length_stop(raw) is None
    blocks = AIMessage([{"type": "output_text", "text": "half"}], response_metadata=capped)
    assert await _length_stop(blocks) == "model_length_capped"


async def test_an_earlier_stop_reason_is_kept() -> None:
    ctx = StubRunContext()
    ctx.stop("loop_capped")
    assert await _length_stop(AIMessage("x", response_metadata={"finish_reason": "length"}), ctx) == "loop_capped"


# -- TerminalResponse --------------------------------------------------------------------------------------

USER, CALL = HumanMessage("list", id="u1"), AIMessage("", tool_calls=[{"name": "ls", "args": {}, "id": "c1"}])
RESULT = ToolMessage("a.txt", tool_call_id="c1", name="ls")


def test_a_tool_result_counts_only_after_the_latest_visible_user_message() -> None:
    assert tool_result_in_current_turn([USER, CALL, RESULT])
    assert not tool_result_in_current_turn([USER, CALL, RESULT, HumanMessage("again")])
    hidden = HumanMessage("reminder", additional_kwargs={"hide_from_ui": True})
    assert tool_result_in_current_turn([USER, CALL, RESULT, hidden])
    assert not tool_result_in_current_turn([CALL, RESULT]), "no user message: not an interactive turn"


async def test_one_retry_with_the_recovery_prompt_then_the_fallback() -> None:
    middleware, ctx = TerminalResponseMiddleware(), StubRunContext()
    empty = AIMessage("", id="empty-1")
    first = await middleware.after_model(ThreadState(messages=[USER, CALL, RESULT, empty]), ctx)
    assert first == {"messages": [RemoveMessage(id="empty-1")], "jump_to": "model"}

    seen: list[ModelRequest] = []

    async def model(request: ModelRequest) -> AIMessage:
        seen.append(request)
        return AIMessage("")

    request = ModelRequest([USER, CALL, RESULT], None, [], ThreadState(), ctx, "m")
    await middleware.wrap_model_call(request, model)
    await middleware.wrap_model_call(request, model)
    recovery = seen[0].messages[-1]
    assert (recovery.content, recovery.name, recovery.additional_kwargs) == (
        RECOVERY_PROMPT,
        "terminal_response_recovery",
        {"hide_from_ui": True},
    )
    assert seen[1].messages == [USER, CALL, RESULT], "the prompt is drained: one call sees it"

    again = AIMessage("", id="empty-2")
    second = await middleware.after_model(ThreadState(messages=[USER, CALL, RESULT, again]), ctx)
    assert second is not None
    [fallback] = second["messages"]
    assert (fallback.id, fallback.content) == ("empty-2", FALLBACK_CONTENT)
    assert fallback.additional_kwargs == {
        "deerflow_error_fallback": True,
        "error_reason": "Model returned an empty terminal response after one retry",
    }


async def test_answers_tool_intent_and_turns_without_tools_are_left_alone() -> None:
    middleware, ctx = TerminalResponseMiddleware(), StubRunContext()
    for last in (
        AIMessage("done"),
        AIMessage("", response_metadata={"finish_reason": "tool_calls"}),
        AIMessage(
            "", invalid_tool_calls=[{"name": "ls", "args": "{", "id": "x", "error": None, "type": "invalid_tool_call"}]
        ),
    ):
        assert await middleware.after_model(ThreadState(messages=[USER, CALL, RESULT, last]), ctx) is None
    assert await middleware.after_model(ThreadState(messages=[USER, AIMessage("")]), ctx) is None


async def _model_inputs(handle: Any, client: Client) -> list[ModelCallInput]:
    return await scheduled_inputs(client, await history_events(handle), "model.invoke", ModelCallInput)


async def test_an_empty_answer_after_tools_is_retried_once_in_a_real_run(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    model = write_script(
        home, [calls(tool_call("ls", "c1", path="/mnt/user-data")), answer(""), answer("the folder is empty")]
    )
    async with running_worker(client, config):
        handle = await start_run(client, config, "what is there?", model=model)
        view = await settle(handle)
        inputs = await _model_inputs(handle, client)
    assert view.status == "completed" and view.final_message == "the folder is empty"
    assert len(inputs) == 3
    assert inputs[2].messages[-1].content == RECOVERY_PROMPT
    assert not any(m.content == RECOVERY_PROMPT for m in inputs[1].messages)
    ai = [m for m in sole_thread_state(home)["messages"] if m["type"] == "ai"]
    assert [m["content"] for m in ai] == ["", "the folder is empty"], "the empty answer left the thread"


async def test_a_second_empty_answer_ends_the_run_with_deerflows_fallback(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    model = write_script(home, [calls(tool_call("ls", "c1", path="/mnt/user-data")), answer(""), answer("")])
    async with running_worker(client, config):
        view = await settle(await start_run(client, config, "what is there?", model=model))
    assert view.status == "error" and view.final_message == FALLBACK_CONTENT


async def test_a_length_capped_answer_keeps_its_text_and_reports_the_cap(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    capped = {"content": "The report, cut sh", "response_metadata": {"finish_reason": "length"}}
    async with running_worker(client, config):
        view = await settle(await start_run(client, config, "write", model=write_script(home, [capped])))
    assert view.status == "completed" and view.final_message == "The report, cut sh"
    assert view.stop_reason == "model_length_capped"


# -- SystemMessageCoalescing -------------------------------------------------------------------------------


def _request(messages: list[Any], system: SystemMessage | None) -> ModelRequest:
    return ModelRequest(messages, system, [], ThreadState(), StubRunContext(), "m")


def test_every_system_message_joins_the_leading_one_and_only_the_last_date_stays() -> None:
    old = SystemMessage(
        date_reminder("2026-01-01, Thursday"), id="r1", additional_kwargs={"dynamic_context_reminder": True, "a": 1}
    )
    new = SystemMessage(
        date_reminder("2026-01-02, Friday"), id="r2", additional_kwargs={"dynamic_context_reminder": True, "b": 2}
    )
    note = SystemMessage([{"type": "text", "text": "note"}, "plain"], id="n")
    human, ai = HumanMessage("hi", id="h"), AIMessage("yo", id="a")
    request = coalesce(_request([old, human, ai, note, new], SystemMessage("prompt", id="p")))
    assert request.messages == [human, ai]
    assert request.system_message is not None
    assert request.system_message.content == "\n\n".join(["prompt", "note\nplain", date_reminder("2026-01-02, Friday")])
    assert request.system_message.id == "p"
    assert request.system_message.additional_kwargs == {"dynamic_context_reminder": True, "b": 2}


def test_a_request_without_system_messages_passes_untouched() -> None:
    request = _request([HumanMessage("hi")], SystemMessage("prompt"))
    assert coalesce(request) is request
    only_in_messages = coalesce(_request([SystemMessage("s", id="s"), HumanMessage("hi")], None))
    assert only_in_messages.system_message == SystemMessage("s", id="s")


async def test_the_model_gets_one_leading_system_message_in_a_real_run(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    async with running_worker(client, config):
        handle = await start_run(client, config, "hi", model=write_script(home, [answer("hello")]))
        await settle(handle)
        [request] = await _model_inputs(handle, client)
    assert not any(m.type == "system" for m in request.messages)
    assert request.system_message is not None
    prompt, _, reminder = str(request.system_message.content).rpartition("\n\n")
    assert reminder.startswith("<system-reminder>\n<current_date>") and prompt
    [stored] = [m for m in sole_thread_state(home)["messages"] if m["type"] == "system"]
    assert stored["content"] == reminder, "the thread keeps the date reminder where DynamicContext put it"


# -- SubagentDateContext -----------------------------------------------------------------------------------


async def test_a_subagent_gets_a_hidden_date_reminder() -> None:
    update = await SubagentDateContextMiddleware().before_agent(ThreadState(), StubRunContext(is_subagent=True))
    assert update is not None
    [message] = update["messages"]
    assert isinstance(message, SystemMessage)
    assert message.content == date_reminder("2026-01-02, Friday")
    assert message.additional_kwargs == {
        "hide_from_ui": True,
        "dynamic_context_reminder": True,
        "reminder_date": "2026-01-02, Friday",
    }
