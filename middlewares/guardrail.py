"""Guardrail: a policy decides, before each tool call, whether it may run.

In the chain only when ``guardrails.enabled`` and a ``guardrails.provider`` is configured (DeerFlow's
condition). Providers are named like DeerFlow's: ``use: module:Class`` plus ``config`` keyword arguments.

* The built-in allowlist (``use: deerflow.guardrails.builtin:AllowlistProvider`` or
  ``middlewares.guardrail:AllowlistProvider``) is a pure set lookup, so it is evaluated right here in the
  workflow: no activity, no history events.
* Any other provider is custom code that may call a policy service (OAP and the like), so it is evaluated
  by the ``guardrail.evaluate`` activity, which imports and builds it in the worker (never in the workflow
  sandbox) and retries transient failures. An activity that still fails counts as a provider error.

Hook
* ``wrap_tool_call`` — builds DeerFlow's ``GuardrailRequest`` from the call and the run context (timestamp
  from the run's clock), asks the provider, and on a denial returns ``ToolMessage("Guardrail denied: tool
  '{name}' was blocked ({code}). Reason: {message}. Choose an alternative approach.", status="error")``
  without calling the handler. A provider error denies with ``oap.evaluator_error`` when ``fail_closed``
  (the default) and lets the call through otherwise. Cancellation passes through.

Writes: the denial ToolMessage (thread state, through the run) and, for each denial or provider error, an
audit record: a warning on the worker log (logger ``middlewares.guardrail``) and a ``guardrail`` progress
event on the run (the ``events`` query) carrying DeerFlow's journal fields. Allowed calls are not recorded.

Parts: the contract ``vocabulary/contracts/guardrail.py`` (``GUARDRAIL_EVALUATE``) and its activity
``activities/guardrails.py``; provider names checked by ``vocabulary/class_path.py``. Tests:
``tests/test_guardrail.py`` (providers in ``tests/support/guardrail_providers.py``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from langchain_core.messages import ToolMessage
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from temporalio.common import RetryPolicy
from temporalio.exceptions import is_cancelled_exception

from middlewares._activity_call import call_activity
from middlewares._logging import hook_logger
from middlewares.base import Middleware, ToolCallRequest, ToolHandler, ToolResult
from middlewares.context import ActivityOptions, RunContext
from vocabulary.class_path import check_class_path
from vocabulary.contracts import (
    GUARDRAIL_EVALUATE,
    GuardrailDecision,
    GuardrailEvaluateInput,
    GuardrailReason,
    GuardrailRequest,
)

logger = hook_logger(__name__)

BUILTIN_ALLOWLIST = frozenset(
    {"deerflow.guardrails.builtin:AllowlistProvider", "middlewares.guardrail:AllowlistProvider"}
)
REASON_MESSAGE_LIMIT = 500

_EVALUATE_OPTIONS = ActivityOptions(
    start_to_close=timedelta(seconds=30),
    retry=RetryPolicy(initial_interval=timedelta(milliseconds=500), maximum_attempts=3),
)


class AllowlistConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    allowed_tools: list[str] | None = None
    """``None``: every tool not denied may run; ``[]``: nothing may run."""
    denied_tools: list[str] = Field(default_factory=list)


class GuardrailProviderConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    use: str
    config: dict[str, Any] = Field(default_factory=dict)

    @field_validator("use")
    @classmethod
    def _module_class(cls, value: str) -> str:
        check_class_path(value)
        return value

    @model_validator(mode="after")
    def _builtin_config(self) -> GuardrailProviderConfig:
        # The built-in is constructed in the workflow: a bad key must fail when the config loads, not there.
        if self.use in BUILTIN_ALLOWLIST:
            AllowlistConfig.model_validate(self.config)
        return self


class GuardrailsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    fail_closed: bool = True
    passport: str | None = None
    """Sent to the provider as ``agent_id``."""
    provider: GuardrailProviderConfig | None = None


class AllowlistProvider:
    """DeerFlow's built-in provider: allow or deny by tool name; the allowlist is checked first."""

    name = "allowlist"

    def __init__(self, *, allowed_tools: list[str] | None = None, denied_tools: list[str] | None = None) -> None:
        # ``[]`` must stay an empty allowlist (deny all): a truthiness test would turn it into "allow all".
        self._allowed = set(allowed_tools) if allowed_tools is not None else None
        self._denied = set(denied_tools or ())

    def evaluate(self, request: GuardrailRequest) -> GuardrailDecision:
        if self._allowed is not None and request.tool_name not in self._allowed:
            reason = GuardrailReason("oap.tool_not_allowed", f"tool '{request.tool_name}' not in allowlist")
            return GuardrailDecision(allow=False, reasons=[reason])
        if request.tool_name in self._denied:
            reason = GuardrailReason("oap.tool_not_allowed", f"tool '{request.tool_name}' is denied")
            return GuardrailDecision(allow=False, reasons=[reason])
        return GuardrailDecision(allow=True, reasons=[GuardrailReason("oap.allowed")])


class GuardrailMiddleware(Middleware):
    def __init__(self, provider: GuardrailProviderConfig, *, fail_closed: bool = True, passport: str | None = None):
        self.provider = provider
        self.fail_closed = fail_closed
        self.passport = passport
        self._allowlist = (
            AllowlistProvider(**AllowlistConfig.model_validate(provider.config).model_dump())
            if provider.use in BUILTIN_ALLOWLIST
            else None
        )

    @classmethod
    def from_config(cls, config: GuardrailsConfig) -> GuardrailMiddleware:
        assert config.provider is not None, "the chain adds Guardrail only when a provider is configured"
        return cls(config.provider, fail_closed=config.fail_closed, passport=config.passport)

    async def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolResult:
        ctx = request.ctx
        guardrail_request = self._build_request(request)
        try:
            decision = await self._evaluate(guardrail_request, ctx)
        except Exception as exc:
            if is_cancelled_exception(exc):
                raise
            logger.warning("Guardrail provider error: %s", exc)
            mode = "fail-closed" if self.fail_closed else "fail-open"
            reason = GuardrailReason("oap.evaluator_error", f"guardrail provider error ({mode})")
            decision = GuardrailDecision(allow=not self.fail_closed, reasons=[reason])
            action = "deny_tool_call" if self.fail_closed else "allow_tool_call_after_provider_error"
            self._audit(ctx, guardrail_request, decision, action=action, provider_error=True)
            return denied_message(request, decision) if self.fail_closed else await handler(request)
        if decision.allow:
            return await handler(request)
        code = decision.reasons[0].code if decision.reasons else "unknown"
        logger.warning("Guardrail denied: tool=%s policy=%s code=%s", request.name, decision.policy_id, code)
        self._audit(ctx, guardrail_request, decision, action="deny_tool_call", provider_error=False)
        return denied_message(request, decision)

    def _build_request(self, request: ToolCallRequest) -> GuardrailRequest:
        ctx = request.ctx
        args = request.args
        return GuardrailRequest(
            tool_name=request.name,
            tool_input=args if isinstance(args, dict) else {},
            agent_id=self.passport,
            thread_id=ctx.thread_id,
            timestamp=ctx.now().isoformat(),
            user_id=ctx.user_id,
            run_id=ctx.run_id,
            tool_call_id=request.call_id or None,
            is_subagent=ctx.is_subagent,
        )

    async def _evaluate(self, request: GuardrailRequest, ctx: RunContext) -> GuardrailDecision:
        if self._allowlist is not None:
            return self._allowlist.evaluate(request)
        return await call_activity(
            ctx,
            GUARDRAIL_EVALUATE,
            GuardrailEvaluateInput(self.provider.use, dict(self.provider.config), request),
            summary=f"Guardrail.wrap_tool_call · evaluate {request.tool_name}",
            options=_EVALUATE_OPTIONS,
        )

    def _audit(
        self,
        ctx: RunContext,
        request: GuardrailRequest,
        decision: GuardrailDecision,
        *,
        action: str,
        provider_error: bool,
    ) -> None:
        """DeerFlow's journal record (``record_middleware(tag="guardrail", …)``), as a progress event."""
        ctx.emit(
            "guardrail",
            middleware=self.name,
            hook="wrap_tool_call",
            action=action,
            tool_name=request.tool_name,
            tool_call_id=request.tool_call_id,
            agent_id=request.agent_id,
            is_subagent=request.is_subagent,
            user_role=request.user_role,
            allow=decision.allow,
            policy_id=decision.policy_id,
            reason_codes=[reason.code for reason in decision.reasons if reason.code],
            reason_messages=[reason.message[:REASON_MESSAGE_LIMIT] for reason in decision.reasons if reason.message],
            fail_closed=self.fail_closed,
            provider_error=provider_error,
        )


def denied_message(request: ToolCallRequest, decision: GuardrailDecision) -> ToolMessage:
    name = request.name or "unknown_tool"
    first = decision.reasons[0] if decision.reasons else None
    code = first.code if first else "oap.denied"
    text = first.message if first else "blocked by guardrail policy"
    return ToolMessage(
        f"Guardrail denied: tool '{name}' was blocked ({code}). Reason: {text}. Choose an alternative approach.",
        tool_call_id=request.call_id or "missing_id",
        name=name,
        status="error",
    )
