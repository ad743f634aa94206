"""TokenBudget: a run that burns through its token budget is warned, then made to answer (DeerFlow's
``TokenBudgetMiddleware``; off by default for the lead, ``middlewares.token_budget.enabled``, and on by default for
subagents, DeerFlow #3875).

Hooks
* ``before_agent``: the usage of the AIMessages already in the thread is the baseline (earlier runs do not count).
* ``after_model``: the run's usage grows by every AIMessage's ``usage_metadata`` above what was seen of it before
  (a message whose usage grows later, as TokenUsage adds a subagent's to its dispatcher, counts the growth). The
  highest of total / ``max_tokens``, input / ``max_input_tokens``, output / ``max_output_tokens`` decides:
  at ``hard_stop_threshold`` the last AIMessage loses its tool calls and gets DeerFlow's ``[TOKEN BUDGET
  EXCEEDED]`` text (**thread state**) and ``ctx.stop("token_capped", …)`` ends the run on it; at
  ``warn_threshold``, once per run, DeerFlow's ``[TOKEN BUDGET WARNING]`` is queued.
* ``wrap_model_call`` — request overlay: queued warnings go to the next model call only, as one ``HumanMessage``
  named ``budget_warning`` (drained: an LLM retry does not see it again), so a tool call keeps its results next
  to it.

Writes: thread state (the stopped message), the request overlay, the stop reason and a progress event; per-run
memory (seen usage, totals, warned, queue) carried across continue-as-new.

Parts: a subagent's ``token_capped`` reaches its lead as ``subagent_stop_reason`` (``vocabulary/delegation.py``);
the chain ``middlewares/chain.py`` picks the lead's or the subagent's budget. Tests: ``tests/test_token_budget.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic import BaseModel, ConfigDict, Field, model_validator

from middlewares._logging import hook_logger
from middlewares._tool_calls import append_text, clone_with_tool_calls
from middlewares.base import Middleware, ModelHandler, ModelRequest
from middlewares.context import RunContext
from vocabulary.state import StateUpdate, ThreadState

logger = hook_logger(__name__)

STOP_REASON = "token_capped"
WARNING_TEXT = (
    "[TOKEN BUDGET WARNING] You have used {used:,} of your {budget:,} {reason} token budget ({percent:.0f}%). "
    "Wrap up your current work and produce a final answer. Avoid starting new tool calls unless absolutely necessary."
)
EXCEEDED_TEXT = (
    "[TOKEN BUDGET EXCEEDED] The {reason} token usage ({used:,}) has exceeded the safety limit ({budget:,}). "
    "Producing final answer with results collected so far."
)
WARNING_MESSAGE_NAME = "budget_warning"


class TokenBudgetConfig(BaseModel):
    """DeerFlow's ``token_budget`` (and ``subagents.token_budget``), with its defaults."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    max_tokens: int = Field(default=200_000, ge=1000, description="total (input + output) tokens per run")
    max_input_tokens: int | None = Field(default=None, ge=1)
    max_output_tokens: int | None = Field(default=None, ge=1)
    warn_threshold: float = Field(default=0.8, ge=0.0, le=1.0)
    hard_stop_threshold: float = Field(default=1.0, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _stop_after_warning(self) -> TokenBudgetConfig:
        if self.hard_stop_threshold < self.warn_threshold:
            raise ValueError("hard_stop_threshold must be >= warn_threshold")
        return self


def default_subagent_budget(*, summarization_enabled: bool) -> TokenBudgetConfig:
    """DeerFlow's ``default_subagent_token_budget``: on, 1M tokens when summarization compacts the context, else
    2M, warning at 70%."""
    return TokenBudgetConfig(
        enabled=True, max_tokens=1_000_000 if summarization_enabled else 2_000_000, warn_threshold=0.7
    )


class TokenBudgetMiddleware(Middleware):
    def __init__(self, config: TokenBudgetConfig) -> None:
        self.config = config
        self._seen: dict[str, tuple[int, int]] = {}
        self._used = {"input": 0, "output": 0, "total": 0}
        self._warned = False
        self._pending: list[str] = []

    async def before_agent(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        for message in state.messages:
            if isinstance(message, AIMessage) and message.id:
                self._seen[message.id] = _usage(message)
        return None

    async def after_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        last = state.messages[-1] if state.messages else None
        if not isinstance(last, AIMessage):
            return None
        self._count(state.messages)
        if self._used["total"] <= 0:
            return None
        limits = [("total", self._used["total"], self.config.max_tokens)]
        if self.config.max_input_tokens:
            limits.append(("input", self._used["input"], self.config.max_input_tokens))
        if self.config.max_output_tokens:
            limits.append(("output", self._used["output"], self.config.max_output_tokens))
        fraction, reason, used, budget = 0.0, "", 0, 0
        for name, value, limit in limits:
            if value / limit > fraction:
                fraction, reason, used, budget = value / limit, name, value, limit
        if fraction >= self.config.hard_stop_threshold:
            logger.warning("Token budget hard stop triggered for run %s: %s limit exceeded", ctx.run_id, reason)
            ctx.stop(STOP_REASON, "token_budget_exceeded", limit=reason, used=used, budget=budget)
            text = EXCEEDED_TEXT.format(reason=reason, used=used, budget=budget)
            return {"messages": [clone_with_tool_calls(last, [], content=append_text(last.content, text))]}
        if fraction >= self.config.warn_threshold and not self._warned:
            self._warned = True
            percent = fraction * 100
            logger.info("Token budget warning triggered for run %s: %s limit at %.1f%%", ctx.run_id, reason, percent)
            ctx.emit("token_budget_warning", limit=reason, used=used, budget=budget)
            self._pending.append(WARNING_TEXT.format(reason=reason, used=used, budget=budget, percent=percent))
        return None

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AIMessage:
        if self._pending:
            warning = HumanMessage("\n\n".join(self._pending), name=WARNING_MESSAGE_NAME)
            self._pending = []
            request = request.override(messages=[*request.messages, warning])
        return await handler(request)

    def _count(self, messages: Sequence[BaseMessage]) -> None:
        for message in messages:
            if not isinstance(message, AIMessage) or not message.id:
                continue
            now_in, now_out = _usage(message)
            seen_in, seen_out = self._seen.get(message.id, (0, 0))
            more_in, more_out = max(0, now_in - seen_in), max(0, now_out - seen_out)
            if more_in or more_out:
                self._used["input"] += more_in
                self._used["output"] += more_out
                self._used["total"] += more_in + more_out
                self._seen[message.id] = (now_in, now_out)

    def export_memory(self) -> dict[str, Any] | None:
        seen = {key: list(value) for key, value in self._seen.items()}
        return {"seen": seen, "used": dict(self._used), "warned": self._warned, "pending": list(self._pending)}

    def import_memory(self, memory: dict[str, Any]) -> None:
        self._seen = {key: (int(v[0]), int(v[1])) for key, v in dict(memory.get("seen") or {}).items()}
        self._used = {key: int(memory.get("used", {}).get(key, 0)) for key in ("input", "output", "total")}
        self._warned = bool(memory.get("warned"))
        self._pending = [str(text) for text in memory.get("pending") or []]


def _usage(message: AIMessage) -> tuple[int, int]:
    usage = message.usage_metadata
    if usage is None:
        return 0, 0
    return int(usage.get("input_tokens", 0) or 0), int(usage.get("output_tokens", 0) or 0)
