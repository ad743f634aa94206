"""SubagentLimit (DeerFlow's ``test_subagent_limit_middleware.py``, ported), the delegation ledger it records, the
subagent status contract of task results, the ``task`` tool's presence, the subagent chain (DeerFlow's
``build_subagent_runtime_middlewares``) and the subagent flag on guardrail requests."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from temporalio.api.enums.v1 import TimeoutType
from temporalio.exceptions import ApplicationError, CancelledError, ChildWorkflowError, RetryState
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

from middlewares.base import ToolCallRequest
from middlewares.chain import build_lead_chain, build_subagent_chain, describe
from middlewares.durable_context import DurableContextMiddleware
from middlewares.guardrail import GuardrailMiddleware, GuardrailProviderConfig
from middlewares.run_settings import RunSettings
from middlewares.subagent_limit import (
    LIMIT_REACHED_NOTICE,
    STOP_SUBAGENT_LIMIT_CAPPED,
    SubagentLimitMiddleware,
    count_prior_delegations,
)
from middlewares.tool_error_handling import ToolErrorHandlingMiddleware
from tests.support import StubRunContext
from vocabulary.delegation import SubagentsSettings, format_subagent_result_message, make_subagent_additional_kwargs
from vocabulary.state import ThreadState, apply_update
from workflows.run.delegation import child_workflow_id, finished_child_message, interrupted_child_message

RUN = "run-1"  # StubRunContext's run id


def task(call_id: str, description: str = "research") -> dict[str, Any]:
    return {
        "name": "task",
        "args": {"description": description, "prompt": "p", "subagent_type": "general-purpose"},
        "id": call_id,
        "type": "tool_call",
    }


def other(call_id: str, name: str = "bash") -> dict[str, Any]:
    return {"name": name, "args": {"command": "ls"}, "id": call_id, "type": "tool_call"}


def ai(*calls: dict[str, Any], content: Any = "", **kwargs: Any) -> AIMessage:
    return AIMessage(content=content, tool_calls=list(calls), id="ai-1", **kwargs)


def ledger(*ids: str, run_id: str | None = RUN) -> list[dict[str, Any]]:
    return [
        {
            "id": i,
            "run_id": run_id,
            "description": "d",
            "subagent_type": "general-purpose",
            "status": "completed",
            "created_at": "t",
        }
        for i in ids
    ]


async def after_model(
    mw: SubagentLimitMiddleware, *messages: Any, delegations: list[dict[str, Any]] | None = None
) -> tuple[dict[str, Any] | None, StubRunContext]:
    ctx = StubRunContext()
    state = ThreadState(messages=[HumanMessage("go", id="h"), *messages], delegations=delegations or [])
    return await mw.after_model(state, ctx), ctx


def kept_ids(update: dict[str, Any] | None) -> list[str]:
    assert update is not None and "messages" in update
    return [call["id"] for call in update["messages"][0].tool_calls]


# -- config: DeerFlow's defaults and clamps ------------------------------------------------------------------


def test_defaults_are_deerflows() -> None:
    config = SubagentsSettings()
    assert (config.max_concurrent, config.max_total, config.timeout_seconds) == (3, 6, 1800)
    assert {name: kind.max_turns for name, kind in config.types.items()} == {"general-purpose": 150, "bash": 60}


@pytest.mark.parametrize(("value", "clamped"), [(-5, 1), (0, 1), (1, 1), (2, 2), (3, 3), (4, 4), (5, 4), (99, 4)])
def test_max_concurrent_is_clamped_to_1_4(value: int, clamped: int) -> None:
    assert SubagentLimitMiddleware(SubagentsSettings(max_concurrent=value)).max_concurrent == clamped


@pytest.mark.parametrize(("value", "clamped"), [(0, 1), (1, 1), (6, 6), (50, 50), (51, 50), (1000, 50)])
def test_max_total_is_clamped_to_1_50(value: int, clamped: int) -> None:
    assert SubagentLimitMiddleware(SubagentsSettings(max_total=value)).max_total == clamped


# -- truncation ---------------------------------------------------------------------------------------------


async def test_no_update_without_an_ai_message_or_tool_calls() -> None:
    mw = SubagentLimitMiddleware()
    assert (await after_model(mw))[0] is None
    assert (await after_model(mw, ai(content="answer")))[0] is None
    assert (await after_model(mw, ai(other("b1"), other("b2"), other("b3"), other("b4"))))[0] is None


async def test_calls_within_the_limit_pass_unchanged() -> None:
    update, ctx = await after_model(SubagentLimitMiddleware(), ai(task("t1"), task("t2"), task("t3")))
    assert update is None  # the ledger is DurableContext's
    assert ctx.stop_reason is None


async def test_five_task_calls_are_truncated_to_three_in_order() -> None:
    update, ctx = await after_model(SubagentLimitMiddleware(), ai(*(task(f"t{i}") for i in range(5))))
    assert kept_ids(update) == ["t0", "t1", "t2"]
    assert ctx.stop_reason is None
    assert [e.kind for e in ctx.events] == ["subagent_limit"]
    assert ctx.events[0].data == {"dropped": ["t3", "t4"], "capped": False}


async def test_truncation_keeps_every_non_task_call_in_place() -> None:
    message = ai(other("b1"), task("t1"), task("t2"), other("b2"), task("t3"), task("t4"), other("b3"))
    update, _ = await after_model(SubagentLimitMiddleware(SubagentsSettings(max_concurrent=2)), message)
    assert kept_ids(update) == ["b1", "t1", "t2", "b2", "b3"]


async def test_replaced_message_keeps_its_id_and_content() -> None:
    update, _ = await after_model(
        SubagentLimitMiddleware(SubagentsSettings(max_concurrent=1)), ai(task("t1"), task("t2"), content="plan")
    )
    assert update is not None
    (message,) = update["messages"]
    assert message.id == "ai-1" and message.content == "plan"


async def test_raw_provider_tool_calls_are_synced() -> None:
    raw = [{"id": f"t{i}", "type": "function", "function": {"name": "task", "arguments": "{}"}} for i in range(3)]
    message = ai(task("t0"), task("t1"), task("t2"), additional_kwargs={"tool_calls": raw})
    update, _ = await after_model(SubagentLimitMiddleware(SubagentsSettings(max_concurrent=2)), message)
    assert update is not None
    assert [r["id"] for r in update["messages"][0].additional_kwargs["tool_calls"]] == ["t0", "t1"]


@pytest.mark.parametrize("max_concurrent", [1, 2, 3, 4])
async def test_each_clamped_concurrency_is_enforced(max_concurrent: int) -> None:
    update, _ = await after_model(
        SubagentLimitMiddleware(SubagentsSettings(max_concurrent=max_concurrent)),
        ai(*(task(f"t{i}") for i in range(6))),
    )
    assert kept_ids(update) == [f"t{i}" for i in range(max_concurrent)]


# -- the per-run total -------------------------------------------------------------------------------------


async def test_total_cap_allows_only_what_is_left_of_the_run_total() -> None:
    update, ctx = await after_model(
        SubagentLimitMiddleware(), ai(task("n1"), task("n2"), task("n3")), delegations=ledger("a", "b", "c", "d", "e")
    )
    assert kept_ids(update) == ["n1"]
    assert ctx.stop_reason is None


async def test_total_cap_counts_only_this_runs_ledger_entries() -> None:
    others = ledger("x1", "x2", "x3", "x4", "x5", "x6", run_id="another-run")
    update, ctx = await after_model(SubagentLimitMiddleware(), ai(task("n1"), task("n2")), delegations=others)
    assert update is None
    assert ctx.stop_reason is None


def test_prior_delegations_are_distinct_ids_and_all_entries_without_a_run_id() -> None:
    entries = [*ledger("a", "a", "b"), *ledger("c", run_id="other")]
    assert count_prior_delegations(entries, RUN) == 2
    assert count_prior_delegations(entries, None) == 3


async def test_exhausted_total_drops_every_task_call_appends_the_notice_and_caps_the_run() -> None:
    update, ctx = await after_model(
        SubagentLimitMiddleware(SubagentsSettings(max_total=2)),
        ai(task("n1"), content="more work", response_metadata={"finish_reason": "tool_calls"}),
        delegations=ledger("a", "b"),
    )
    assert update is not None
    (message,) = update["messages"]
    assert message.tool_calls == []
    assert message.content == "more work\n\n" + LIMIT_REACHED_NOTICE
    assert message.response_metadata["finish_reason"] == "stop"
    assert ctx.stop_reason == STOP_SUBAGENT_LIMIT_CAPPED == "subagent_limit_capped"
    assert ctx.events[0].data == {"dropped": ["n1"], "capped": True}


def test_notice_is_deerflows_text() -> None:
    assert LIMIT_REACHED_NOTICE == (
        "[SUBAGENT LIMIT REACHED] The subagent delegation limit for this run has been reached. Continue using the "
        "subagent results already collected, execute remaining simple work directly, or summarize the remaining "
        "work instead of launching more subagents."
    )


async def test_exhausted_total_keeps_other_tools_and_list_content() -> None:
    message = ai(task("n1"), other("b1"), content=[{"type": "text", "text": "hi"}])
    update, ctx = await after_model(
        SubagentLimitMiddleware(SubagentsSettings(max_total=1)), message, delegations=ledger("a")
    )
    assert kept_ids(update) == ["b1"]
    assert update is not None
    assert update["messages"][0].content[-1] == {"type": "text", "text": "\n\n" + LIMIT_REACHED_NOTICE}
    assert ctx.stop_reason == "subagent_limit_capped"


# -- the ledger DurableContext records after it ------------------------------------------------------------


async def ledger_after(*messages: Any) -> dict[str, Any] | None:
    """SubagentLimit's after_model, then DurableContext's (earlier in the chain: after it in reverse order)."""
    ctx = StubRunContext()
    state = ThreadState(messages=[HumanMessage("go", id="h"), *messages])
    limited = await SubagentLimitMiddleware().after_model(state, ctx)
    if limited:
        state = apply_update(state, limited, new_id=ctx.uuid)
    return await DurableContextMiddleware().after_model(state, ctx)


async def test_ledger_records_only_the_kept_calls_so_the_current_response_is_never_prior() -> None:
    update = await ledger_after(ai(*(task(f"t{i}") for i in range(5))))
    assert update is not None
    assert [(e["id"], e["run_id"], e["status"]) for e in update["delegations"]] == [
        ("t0", RUN, "in_progress"),
        ("t1", RUN, "in_progress"),
        ("t2", RUN, "in_progress"),
    ]


async def test_ledger_takes_the_status_a_task_result_carries_and_skips_earlier_runs() -> None:
    earlier = [AIMessage("", tool_calls=[task("old")], id="ai-0"), ToolMessage("r", tool_call_id="old", id="m0")]
    boundary = HumanMessage("go", id="h2", additional_kwargs={"run_id": RUN})
    result = ToolMessage(
        "Task Succeeded. Result: ok",
        tool_call_id="t1",
        id="m1",
        additional_kwargs=make_subagent_additional_kwargs("completed", result="ok"),
    )
    update = await ledger_after(
        *earlier, boundary, AIMessage("", tool_calls=[task("t1")], id="ai-1"), result, AIMessage("done", id="ai-2")
    )
    assert update is not None
    (entry,) = update["delegations"]
    assert entry["id"] == "t1" and entry["status"] == "completed"
    assert entry["result_sha256"] == hashlib.sha256(b"ok").hexdigest()


# -- the task tool and the chains --------------------------------------------------------------------------


def test_task_tool_and_limit_are_in_the_lead_chain_only_when_subagents_are_enabled() -> None:
    off = build_lead_chain(RunSettings())
    on = build_lead_chain(RunSettings(subagent_enabled=True))
    assert "SubagentLimit" not in describe(off)
    assert not any(tool.name == "task" for mw in off for tool in mw.tools())
    names = describe(on)
    # DeerFlow's position: after DeferredToolFilter/ViewImage, right before LoopDetection.
    assert names[names.index("SubagentLimit") + 1] == "LoopDetection"
    assert [tool.name for mw in on for tool in mw.tools() if tool.name == "task"] == ["task"]


def test_subagent_chain_is_deerflows_section_1_5() -> None:
    settings = RunSettings(subagent_enabled=True)
    assert describe(build_subagent_chain(settings)) == [
        "InputSanitization",
        "ToolOutputBudget",
        "ToolResultSanitization",
        "ThreadData",
        "Sandbox",
        "DanglingToolCall",
        "LLMErrorHandling",
        "SandboxAudit",
        "ReadBeforeWrite",
        "ToolErrorHandling",
        "SkillActivation",
        "SkillToolPolicy",
        "LoopDetection",
        "TokenBudget",
        "SafetyFinishReason",
        "DurableContext",
        "SubagentDateContext",
        "SystemMessageCoalescing",
    ]
    chain = build_subagent_chain(settings)
    assert not any(tool.name == "task" for mw in chain for tool in mw.tools())
    assert not any(mw.tools() for mw in chain if mw.name == "Clarification")


def test_child_workflow_ids_are_sanitised() -> None:
    assert child_workflow_id("hartflow-t", "call_1") == "hartflow-t-task-call_1"
    assert child_workflow_id("hartflow-t", "a/b c:d") == "hartflow-t-task-a_b_c_d"


# -- the subagent status contract --------------------------------------------------------------------------


def test_result_texts_follow_the_status_contract() -> None:
    assert format_subagent_result_message("completed", result="x") == ("Task Succeeded. Result: x", None)
    assert format_subagent_result_message("completed", result="x", stop_reason="turn_capped")[0] == (
        "Task Succeeded (capped: turn budget). Result: x"
    )
    assert format_subagent_result_message("failed") == ("Task failed.", "Task failed.")
    assert format_subagent_result_message("failed", error="boom") == ("Task failed. Error: boom", "boom")
    assert format_subagent_result_message("timed_out") == ("Task timed out.", "Task timed out.")
    assert format_subagent_result_message("cancelled") == ("Task cancelled by user.", "Task cancelled by user.")


def test_finished_child_becomes_a_completed_result_with_usage() -> None:
    usage = {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}
    message = finished_child_message(
        "t1",
        message_id="m",
        status="completed",
        final_message="found it",
        stop_reason=None,
        model_name="scripted:x",
        usage=usage,
    )
    assert message.content == "Task Succeeded. Result: found it" and message.status == "success"
    assert message.additional_kwargs["subagent_status"] == "completed"
    assert message.additional_kwargs["subagent_token_usage"] == usage
    assert message.additional_kwargs["subagent_result_brief"] == "found it"


def test_a_child_without_an_answer_at_its_turn_limit_is_a_capped_failure() -> None:
    message = finished_child_message(
        "t1",
        message_id="m",
        status="completed",
        final_message=None,
        stop_reason="recursion_limit",
        model_name=None,
        usage=None,
    )
    assert message.status == "error"
    assert message.content == "Task failed (capped: turn budget). Error: The subagent ended without a final answer."
    assert message.additional_kwargs["subagent_stop_reason"] == "turn_capped"


def _child_error(cause: BaseException) -> ChildWorkflowError:
    error = ChildWorkflowError(
        "Child Workflow execution failed",
        namespace="default",
        workflow_id="w",
        run_id="r",
        workflow_type="HartflowSubagent",
        initiated_event_id=1,
        started_event_id=2,
        retry_state=RetryState.NON_RETRYABLE_FAILURE,
    )
    error.__cause__ = cause
    return error


def test_timed_out_and_cancelled_children_have_their_own_statuses() -> None:
    timeout = _child_error(
        TemporalTimeoutError("timed out", type=TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE, last_heartbeat_details=[])
    )
    timed_out = interrupted_child_message("t1", timeout, message_id="m", timeout_seconds=30)
    assert timed_out is not None and timed_out.status == "error"
    assert timed_out.content == "Task timed out. Error: The subagent did not finish within 30 seconds."
    cancelled = interrupted_child_message("t1", _child_error(CancelledError("x")), message_id="m", timeout_seconds=1)
    assert cancelled is not None and cancelled.content == "Task cancelled by user."
    assert (
        interrupted_child_message("t1", _child_error(ApplicationError("x")), message_id="m", timeout_seconds=1) is None
    )


async def test_a_failed_task_becomes_tool_error_handlings_task_failure() -> None:
    ctx = StubRunContext()
    request = ToolCallRequest(task("t1"), None, ThreadState(), ctx)

    async def failing(_: ToolCallRequest) -> ToolMessage:
        raise _child_error(ApplicationError("run failed: the message is empty", type="BadInput"))

    message = await ToolErrorHandlingMiddleware().wrap_tool_call(request, failing)
    assert isinstance(message, ToolMessage)
    assert message.content == (
        "Task failed. Error: BadInput: run failed: the message is empty. "
        "Continue with available context, or choose an alternative tool."
    )
    assert message.status == "error" and message.name == "task"
    assert message.additional_kwargs["subagent_status"] == "failed"
    assert message.additional_kwargs["subagent_error"] == "BadInput: run failed: the message is empty"
    assert message.additional_kwargs["deerflow_tool_meta"]["source"] == "exception"


async def test_guardrail_requests_of_a_subagent_say_so() -> None:
    ctx = StubRunContext(is_subagent=True)
    middleware = GuardrailMiddleware(
        GuardrailProviderConfig(use="deerflow.guardrails.builtin:AllowlistProvider", config={"allowed_tools": []})
    )
    request = ToolCallRequest(other("b1"), None, ThreadState(), ctx)

    async def never(_: ToolCallRequest) -> ToolMessage:
        raise AssertionError("a denied call must not run")

    await middleware.wrap_tool_call(request, never)
    assert [e.data["is_subagent"] for e in ctx.events if e.kind == "guardrail"] == [True]
