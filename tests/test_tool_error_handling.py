"""ToolErrorHandling: failures become DeerFlow's error ToolMessage, successes get ``deerflow_tool_meta``,
cancellation and the clarification pause pass through; plus a real run that survives a failing tool."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from temporalio.client import Client
from temporalio.exceptions import ApplicationError, CancelledError, TimeoutError, TimeoutType

from middlewares._tool_meta import TOOL_META_KEY, classify_error_text, tool_result_meta
from middlewares.base import Command, ToolCallRequest, ToolResult
from middlewares.tool_error_handling import ToolErrorHandlingMiddleware
from tests.support import StubRunContext, activity_error, sole_thread_state, start_run
from vocabulary.contracts import MODEL_INVOKE, ModelCallInput
from vocabulary.state import ThreadState
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, write_script
from workers.testing.history import history_events, scheduled_inputs


def _request(name: Any = "web_search", call_id: Any = "call-1") -> ToolCallRequest:
    return ToolCallRequest({"name": name, "id": call_id, "args": {}}, None, ThreadState(), StubRunContext())


async def _run(exc: BaseException, request: ToolCallRequest | None = None) -> ToolResult:
    async def failing(_: ToolCallRequest) -> ToolResult:
        raise exc

    return await ToolErrorHandlingMiddleware().wrap_tool_call(request or _request(), failing)


# -- failures --------------------------------------------------------------------------------------------


async def test_a_failed_activity_becomes_the_error_message_of_the_original_exception() -> None:
    result = await _run(activity_error(ApplicationError("upstream exploded", type="RuntimeError")))
    assert isinstance(result, ToolMessage)
    assert result.content == (
        "Error: Tool 'web_search' failed with RuntimeError: upstream exploded. "
        "Continue with available context, or choose an alternative tool."
    )
    assert (result.status, result.name, result.tool_call_id) == ("error", "web_search", "call-1")
    assert result.additional_kwargs[TOOL_META_KEY] == {
        "status": "error",
        "error_type": "unknown",
        "recoverable_by_model": True,
        "recommended_next_action": "try_alternative",
        "source": "exception",
    }


async def test_the_exception_meta_is_classified_from_class_and_detail() -> None:
    result = await _run(activity_error(ApplicationError("connection refused", type="ConnectionError")))
    assert isinstance(result, ToolMessage)
    meta = result.additional_kwargs[TOOL_META_KEY]
    assert (meta["error_type"], meta["recommended_next_action"], meta["source"]) == (
        "transient",
        "try_alternative",
        "exception",
    )


async def test_an_activity_timeout_is_reported_as_such() -> None:
    timeout = TimeoutError("activity StartToClose timeout", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=[])
    result = await _run(activity_error(timeout))
    assert isinstance(result, ToolMessage)
    assert str(result.content).startswith(
        "Error: Tool 'web_search' failed with TimeoutError: activity StartToClose timeout."
    )
    assert result.additional_kwargs[TOOL_META_KEY]["error_type"] == "transient"


@pytest.mark.parametrize(
    ("message", "detail"),
    [
        ("x" * 500, "x" * 500),
        ("x" * 501, "x" * 497 + "..."),
        ("  spaced  ", "spaced"),
        ("", "KeyError"),
    ],
)
async def test_the_detail_is_at_most_500_characters(message: str, detail: str) -> None:
    result = await _run(activity_error(ApplicationError(message, type="KeyError")))
    assert isinstance(result, ToolMessage)
    assert result.content == (
        f"Error: Tool 'web_search' failed with KeyError: {detail}. "
        "Continue with available context, or choose an alternative tool."
    )


async def test_a_failure_inside_the_workflow_is_named_by_its_class() -> None:
    result = await _run(ValueError("bad value"))
    assert isinstance(result, ToolMessage)
    assert str(result.content).startswith("Error: Tool 'web_search' failed with ValueError: bad value.")


async def test_missing_name_and_id_fall_back() -> None:
    result = await _run(ValueError("x"), _request(name=None, call_id=None))
    assert isinstance(result, ToolMessage)
    assert (result.name, result.tool_call_id) == ("unknown_tool", "missing_tool_call_id")
    assert str(result.content).startswith("Error: Tool 'unknown_tool' failed with ValueError")


@pytest.mark.parametrize(
    "cancellation",
    [
        asyncio.CancelledError(),
        CancelledError("cancelled"),
        activity_error(CancelledError("cancelled")),
    ],
)
async def test_cancellation_is_never_swallowed(cancellation: BaseException) -> None:
    with pytest.raises(type(cancellation)):
        await _run(cancellation)


# -- successes -------------------------------------------------------------------------------------------


async def _stamp(result: ToolResult, request: ToolCallRequest | None = None) -> ToolResult:
    async def tool(_: ToolCallRequest) -> ToolResult:
        return result

    return await ToolErrorHandlingMiddleware().wrap_tool_call(request or _request(), tool)


async def test_a_successful_result_is_stamped() -> None:
    original = ToolMessage("42 results", tool_call_id="call-1", name="web_search")
    result = await _stamp(original)
    assert isinstance(result, ToolMessage)
    assert result.additional_kwargs[TOOL_META_KEY] == {
        "status": "success",
        "error_type": None,
        "recoverable_by_model": True,
        "recommended_next_action": "continue",
        "source": "content_analysis",
    }
    assert TOOL_META_KEY not in original.additional_kwargs, "the tool's message is not mutated"


async def test_a_tools_own_stamp_is_kept() -> None:
    own = {"status": "partial_success", "source": "tool_return"}
    result = await _stamp(ToolMessage("x", tool_call_id="call-1", additional_kwargs={TOOL_META_KEY: own}))
    assert isinstance(result, ToolMessage) and result.additional_kwargs[TOOL_META_KEY] == own


async def test_in_a_command_only_this_calls_message_is_stamped_and_the_interrupt_passes() -> None:
    mine = ToolMessage("asked", tool_call_id="call-1", name="ask_clarification")
    other = ToolMessage("other", tool_call_id="call-2")
    interrupt = {"kind": "human_input_request", "question": "Which one?"}
    command = Command(update={"messages": [mine, other, HumanMessage("h")], "artifacts": ["/a"]}, interrupt=interrupt)
    result = await _stamp(command)
    assert isinstance(result, Command)
    assert result.interrupt is interrupt
    assert result.update["artifacts"] == ["/a"]
    stamped, untouched, human = result.update["messages"]
    assert stamped.additional_kwargs[TOOL_META_KEY]["status"] == "success"
    assert untouched is other and human.content == "h"


@pytest.mark.parametrize(
    ("content", "status", "expected"),
    [
        ("Error: File not found: /x", "success", ("error", "not_found", "rewrite_query", "tool_return")),
        ("Error: 401 Unauthorized", "success", ("error", "auth", "stop", "tool_return")),
        ("Error: took 500ms then gave up", "success", ("error", "unknown", "try_alternative", "tool_return")),
        ("Error: HTTP 500 from upstream", "success", ("error", "internal", "stop", "tool_return")),
        ("Error: Permission denied", "success", ("error", "permission", "try_alternative", "tool_return")),
        ("Error: tavily is not configured", "success", ("error", "config", "stop", "tool_return")),
        (
            '{"error": "rate limit exceeded", "query": "not found"}',
            "success",
            ("error", "rate_limited", "summarize", "tool_return"),
        ),
        ('{"error": "none", "results": []}', "success", ("success", None, "continue", "content_analysis")),
        ('{"error": 404}', "success", ("error", "not_found", "rewrite_query", "tool_return")),
        ('{"user_id": 401}', "error", ("error", "unknown", "try_alternative", "tool_return")),
        ("request timed out", "error", ("error", "transient", "try_alternative", "tool_return")),
        ("No results found for 'x'", "success", ("partial_success", None, "rewrite_query", "content_analysis")),
        ("output truncated at 20000 chars", "success", ("partial_success", None, "rewrite_query", "content_analysis")),
        ("all good", "success", ("success", None, "continue", "content_analysis")),
    ],
)
def test_keyword_rules(content: str, status: str, expected: tuple[Any, ...]) -> None:
    meta = tool_result_meta(ToolMessage(content, tool_call_id="c", status=status))  # type: ignore[arg-type]
    assert (meta["status"], meta["error_type"], meta["recommended_next_action"], meta["source"]) == expected


def test_the_first_matching_rule_wins() -> None:
    assert classify_error_text("403 forbidden")["error_type"] == "auth"
    assert classify_error_text("no results found (404)")["error_type"] == "no_results"


# -- on a real run ---------------------------------------------------------------------------------------


async def test_a_failing_tool_activity_becomes_an_error_result_and_the_run_goes_on(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    # ``ls`` without ``path``: the tool activity fails with a non-retryable InvalidToolArguments.
    model = write_script(home, [calls(tool_call("ls", "ls1")), answer("recovered")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "list", model=model)
        view = await settle(handle)
        events = await history_events(handle)
        model_inputs = await scheduled_inputs(client, events, MODEL_INVOKE, ModelCallInput)
    assert view.status == "completed" and view.final_message == "recovered"
    expected = (
        "Error: Tool 'ls' failed with InvalidToolArguments: Invalid arguments for tool 'ls': path: Field required. "
        "Continue with available context, or choose an alternative tool."
    )
    state = sole_thread_state(home)
    [result] = [m for m in state["messages"] if m["type"] == "tool"]
    assert (result["content"], result["status"], result["tool_call_id"]) == (expected, "error", "ls1")
    assert result["additional_kwargs"][TOOL_META_KEY]["source"] == "exception"
    # The model saw the error and answered.
    sent = [m for m in model_inputs[1].messages if isinstance(m, ToolMessage)]
    assert [m.content for m in sent] == [expected]
