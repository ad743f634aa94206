"""Guardrail: the built-in allowlist (in the workflow), custom providers (in the ``guardrail.evaluate``
activity), DeerFlow's denial text, fail-closed/fail-open, and the audit record of each denial."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities.guardrails import GuardrailActivities
from middlewares.base import ToolCallRequest, ToolResult
from middlewares.chain import build_lead_chain, describe
from middlewares.guardrail import (
    AllowlistProvider,
    GuardrailMiddleware,
    GuardrailProviderConfig,
    GuardrailsConfig,
)
from middlewares.run_settings import RunSettings
from tests.support import StubRunContext, sole_thread_state, start_run
from vocabulary.contracts import (
    GUARDRAIL_EVALUATE,
    GuardrailDecision,
    GuardrailEvaluateInput,
    GuardrailReason,
    GuardrailRequest,
)
from vocabulary.state import ThreadState
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, write_script
from workers.testing.history import history_events, scheduled_activities

ALLOWLIST = "deerflow.guardrails.builtin:AllowlistProvider"
DENY_WORDS = "tests.support.guardrail_providers:DenyWords"

# -- the built-in allowlist ------------------------------------------------------------------------------


def _decide(provider: AllowlistProvider, tool: str) -> tuple[bool, list[tuple[str, str]]]:
    decision = provider.evaluate(GuardrailRequest(tool_name=tool, tool_input={}))
    return decision.allow, [(r.code, r.message) for r in decision.reasons]


def test_no_allowlist_allows_everything_not_denied() -> None:
    provider = AllowlistProvider(denied_tools=["bash"])
    assert _decide(provider, "ls") == (True, [("oap.allowed", "")])
    assert _decide(provider, "bash") == (False, [("oap.tool_not_allowed", "tool 'bash' is denied")])


def test_an_empty_allowlist_denies_everything() -> None:
    provider = AllowlistProvider(allowed_tools=[])
    assert _decide(provider, "ls") == (False, [("oap.tool_not_allowed", "tool 'ls' not in allowlist")])


def test_the_allowlist_is_checked_before_the_denylist() -> None:
    provider = AllowlistProvider(allowed_tools=["ls", "bash"], denied_tools=["bash", "grep"])
    assert _decide(provider, "ls")[0] is True
    assert _decide(provider, "bash") == (False, [("oap.tool_not_allowed", "tool 'bash' is denied")])
    assert _decide(provider, "grep") == (False, [("oap.tool_not_allowed", "tool 'grep' not in allowlist")])


# -- the middleware --------------------------------------------------------------------------------------


class _Tool:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, request: ToolCallRequest) -> ToolResult:
        self.calls += 1
        return ToolMessage("ran", tool_call_id=request.call_id, name=request.name)


def _middleware(use: str = ALLOWLIST, config: dict[str, Any] | None = None, **options: Any) -> GuardrailMiddleware:
    return GuardrailMiddleware(GuardrailProviderConfig(use=use, config=config or {}), **options)


def _request(ctx: StubRunContext, name: str = "bash", **args: Any) -> ToolCallRequest:
    return ToolCallRequest({"name": name, "id": "call-1", "args": args}, None, ThreadState(), ctx)


def _audits(ctx: StubRunContext) -> list[dict[str, Any]]:
    return [e.data for e in ctx.events if e.kind == "guardrail"]


async def test_a_denied_call_never_runs_and_is_audited(caplog: pytest.LogCaptureFixture) -> None:
    ctx, tool = StubRunContext(), _Tool()
    middleware = _middleware(config={"allowed_tools": ["ls"]}, passport="agent-7")
    with caplog.at_level(logging.WARNING, logger="middlewares.guardrail"):
        result = await middleware.wrap_tool_call(_request(ctx, command="ls"), tool)
    assert tool.calls == 0
    assert isinstance(result, ToolMessage)
    assert result.content == (
        "Guardrail denied: tool 'bash' was blocked (oap.tool_not_allowed). "
        "Reason: tool 'bash' not in allowlist. Choose an alternative approach."
    )
    assert (result.status, result.name, result.tool_call_id) == ("error", "bash", "call-1")
    assert ctx.calls == [], "the built-in allowlist is evaluated in the workflow, without an activity"
    assert _audits(ctx) == [
        {
            "middleware": "Guardrail",
            "hook": "wrap_tool_call",
            "action": "deny_tool_call",
            "tool_name": "bash",
            "tool_call_id": "call-1",
            "agent_id": "agent-7",
            "is_subagent": False,
            "user_role": None,
            "allow": False,
            "policy_id": None,
            "reason_codes": ["oap.tool_not_allowed"],
            "reason_messages": ["tool 'bash' not in allowlist"],
            "fail_closed": True,
            "provider_error": False,
        }
    ]
    assert "Guardrail denied: tool=bash policy=None code=oap.tool_not_allowed" in caplog.text


async def test_an_allowed_call_runs_unrecorded() -> None:
    ctx, tool = StubRunContext(), _Tool()
    result = await _middleware(config={"allowed_tools": ["bash"]}).wrap_tool_call(_request(ctx), tool)
    assert tool.calls == 1 and isinstance(result, ToolMessage) and result.content == "ran"
    assert _audits(ctx) == []


def _custom_ctx(answer: Any) -> StubRunContext:
    async def evaluate(arg: GuardrailEvaluateInput) -> GuardrailDecision:
        if isinstance(answer, BaseException):
            raise answer
        return answer  # type: ignore[no-any-return]

    return StubRunContext(activities={GUARDRAIL_EVALUATE: evaluate})


async def test_a_custom_provider_is_asked_through_the_activity_with_deerflows_request() -> None:
    decision = GuardrailDecision(False, [GuardrailReason("oap.policy", "not on weekends")], policy_id="p-9")
    ctx, tool = _custom_ctx(decision), _Tool()
    middleware = _middleware(DENY_WORDS, {"words": ["rm"]}, passport="agent-7")
    result = await middleware.wrap_tool_call(_request(ctx, command="rm x"), tool)
    assert tool.calls == 0
    assert isinstance(result, ToolMessage)
    assert result.content == (
        "Guardrail denied: tool 'bash' was blocked (oap.policy). Reason: not on weekends. "
        "Choose an alternative approach."
    )
    [(activity, arg, summary)] = ctx.calls
    assert (activity, summary) == (GUARDRAIL_EVALUATE, "Guardrail.wrap_tool_call · evaluate bash")
    assert (arg.use, arg.config) == (DENY_WORDS, {"words": ["rm"]})
    assert arg.request == GuardrailRequest(
        tool_name="bash",
        tool_input={"command": "rm x"},
        agent_id="agent-7",
        thread_id="thread-1",
        timestamp=StubRunContext.NOW.isoformat(),
        user_id="default",
        run_id="run-1",
        tool_call_id="call-1",
    )
    assert _audits(ctx)[0]["policy_id"] == "p-9"


async def test_a_denial_without_reasons_uses_deerflows_defaults() -> None:
    ctx = _custom_ctx(GuardrailDecision(allow=False))
    result = await _middleware(DENY_WORDS).wrap_tool_call(_request(ctx), _Tool())
    assert isinstance(result, ToolMessage)
    assert result.content == (
        "Guardrail denied: tool 'bash' was blocked (oap.denied). Reason: blocked by guardrail policy. "
        "Choose an alternative approach."
    )


async def test_a_provider_error_fails_closed_by_default() -> None:
    ctx, tool = _custom_ctx(ApplicationError("policy service down", type="ConnectionError")), _Tool()
    result = await _middleware(DENY_WORDS).wrap_tool_call(_request(ctx), tool)
    assert tool.calls == 0
    assert isinstance(result, ToolMessage)
    assert result.content == (
        "Guardrail denied: tool 'bash' was blocked (oap.evaluator_error). "
        "Reason: guardrail provider error (fail-closed). Choose an alternative approach."
    )
    [audit] = _audits(ctx)
    assert (audit["action"], audit["provider_error"], audit["allow"]) == ("deny_tool_call", True, False)


async def test_a_provider_error_lets_the_call_through_when_fail_open() -> None:
    ctx, tool = _custom_ctx(ApplicationError("policy service down")), _Tool()
    result = await _middleware(DENY_WORDS, fail_closed=False).wrap_tool_call(_request(ctx), tool)
    assert tool.calls == 1 and isinstance(result, ToolMessage) and result.content == "ran"
    [audit] = _audits(ctx)
    assert (audit["action"], audit["provider_error"], audit["allow"]) == (
        "allow_tool_call_after_provider_error",
        True,
        True,
    )
    assert audit["reason_codes"] == ["oap.evaluator_error"]
    assert audit["reason_messages"] == ["guardrail provider error (fail-open)"]


async def test_cancellation_passes_through() -> None:
    ctx = _custom_ctx(asyncio.CancelledError())
    with pytest.raises(asyncio.CancelledError):
        await _middleware(DENY_WORDS).wrap_tool_call(_request(ctx), _Tool())


async def test_long_reason_messages_are_cut_in_the_audit() -> None:
    ctx = _custom_ctx(GuardrailDecision(False, [GuardrailReason("c", "x" * 900)]))
    await _middleware(DENY_WORDS).wrap_tool_call(_request(ctx), _Tool())
    assert _audits(ctx)[0]["reason_messages"] == ["x" * 500]


# -- config and chain ------------------------------------------------------------------------------------


def test_a_bad_builtin_config_fails_when_the_config_loads() -> None:
    with pytest.raises(ValueError, match="allowed"):
        GuardrailProviderConfig(use=ALLOWLIST, config={"allowed": ["ls"]})
    with pytest.raises(ValueError, match=r"package\.module:ClassName"):
        GuardrailProviderConfig(use="AllowlistProvider")


@pytest.mark.parametrize(
    ("guardrails", "present"),
    [
        ({}, False),
        ({"enabled": True}, False),
        ({"provider": {"use": ALLOWLIST}}, False),
        ({"enabled": True, "provider": {"use": ALLOWLIST}}, True),
    ],
)
def test_guardrail_joins_the_chain_only_when_enabled_with_a_provider(guardrails: dict[str, Any], present: bool) -> None:
    settings = RunSettings.model_validate({"middlewares": {"guardrails": guardrails}})
    assert ("Guardrail" in describe(build_lead_chain(settings))) is present
    assert GuardrailsConfig.model_validate(guardrails).fail_closed is True


# -- the activity ----------------------------------------------------------------------------------------


async def test_the_activity_builds_deerflow_style_providers() -> None:
    request = GuardrailRequest(tool_name="bash", tool_input={"command": "rm -r x"}, agent_id="a1")
    decision = await GuardrailActivities().evaluate(GuardrailEvaluateInput(DENY_WORDS, {"words": ["rm"]}, request))
    assert decision == GuardrailDecision(
        allow=False,
        reasons=[GuardrailReason("policy.word_denied", "mentions 'rm' (agent a1, built for deerflow)")],
        policy_id="deny-words",
    )


@pytest.mark.parametrize(
    "use",
    [
        "tests.no_such_module:Provider",
        "tests.support.guardrail_providers:Missing",
        "tests.support.guardrail_providers:NotADecision",
    ],
)
async def test_broken_providers_fail_non_retryably(use: str) -> None:
    request = GuardrailRequest(tool_name="bash", tool_input={})
    with pytest.raises(ApplicationError) as raised:
        await GuardrailActivities().evaluate(GuardrailEvaluateInput(use, {}, request))
    assert raised.value.non_retryable and raised.value.type == "GuardrailProviderError"


# -- on real runs ----------------------------------------------------------------------------------------


def _tool_messages(home: Path) -> list[dict[str, Any]]:
    state = sole_thread_state(home)
    return [m for m in state["messages"] if m["type"] == "tool"]


async def test_the_allowlist_denies_on_a_real_run(client: Client, home: Path, temporal_address: str) -> None:
    guardrails = {"enabled": True, "provider": {"use": ALLOWLIST, "config": {"allowed_tools": ["ls"]}}}
    config = make_config(home, temporal_address, run={"middlewares": {"guardrails": guardrails}})
    write = tool_call("write_file", "w1", path="/mnt/user-data/workspace/x.txt", content="x")
    model = write_script(home, [calls(write, tool_call("ls", "l1", path="/mnt/user-data")), answer("ok")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "write", model=model)
        view = await settle(handle)
        activities = [name for name, _ in scheduled_activities(await history_events(handle))]
        events = await handle.query("events", 0, result_type=list[dict[str, Any]])
    assert view.status == "completed"
    assert activities.count("tool.execute") == 1, "only ls runs"
    assert "guardrail.evaluate" not in activities
    assert not list(home.glob("users/*/threads/*/user-data/workspace/x.txt"))
    denied, listed = _tool_messages(home)
    assert denied["content"] == (
        "Guardrail denied: tool 'write_file' was blocked (oap.tool_not_allowed). "
        "Reason: tool 'write_file' not in allowlist. Choose an alternative approach."
    )
    assert (denied["status"], listed["status"]) == ("error", "success")
    assert [(e["tool_name"], e["action"]) for e in events if e["kind"] == "guardrail"] == [
        ("write_file", "deny_tool_call")
    ]


async def test_custom_providers_run_in_the_activity(client: Client, home: Path, temporal_address: str) -> None:
    guardrails = {"enabled": True, "passport": "lead", "provider": {"use": DENY_WORDS, "config": {"words": ["secret"]}}}
    config = make_config(home, temporal_address, run={"middlewares": {"guardrails": guardrails}})
    model = write_script(
        home,
        [
            calls(tool_call("bash", "b1", command="echo fine"), tool_call("bash", "b2", command="cat secret.txt")),
            answer("ok"),
        ],
    )
    async with running_worker(client, config):
        handle = await start_run(client, config, "go", model=model)
        view = await settle(handle)
        activities = scheduled_activities(await history_events(handle))
    assert view.status == "completed"
    assert [summary for name, summary in activities if name == "guardrail.evaluate"] == [
        "Guardrail.wrap_tool_call · evaluate bash"
    ] * 2
    assert [name for name, _ in activities].count("tool.execute") == 1
    ran, denied = _tool_messages(home)
    assert ran["tool_call_id"] == "b1" and "fine" in ran["content"]
    assert denied["content"] == (
        "Guardrail denied: tool 'bash' was blocked (policy.word_denied). "
        "Reason: mentions 'secret' (agent lead, built for deerflow). Choose an alternative approach."
    )


async def test_an_unloadable_provider_fails_closed(client: Client, home: Path, temporal_address: str) -> None:
    guardrails = {"enabled": True, "provider": {"use": "tests.no_such_module:Provider"}}
    config = make_config(home, temporal_address, run={"middlewares": {"guardrails": guardrails}})
    model = write_script(home, [calls(tool_call("ls", "l1", path="/mnt/user-data")), answer("ok")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "go", model=model)
        view = await settle(handle)
        activities = [name for name, _ in scheduled_activities(await history_events(handle))]
    assert view.status == "completed"
    assert activities.count("guardrail.evaluate") == 1 and "tool.execute" not in activities
    [denied] = _tool_messages(home)
    assert "(oap.evaluator_error). Reason: guardrail provider error (fail-closed)." in denied["content"]
