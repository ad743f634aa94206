"""LLMErrorHandling's side of the circuit breaker: admit a model call, and report how an admitted call ended.

The breaker is consulted in the workflow (``middlewares/llm_error_handling.py`` says why) through the
``llm_breaker.check`` local activity, unless the run knows it closed: since :data:`patches.BREAKER_IN_MODEL_CALL`,
a run whose last check or gated call found the breaker closed with no failures (``ctx.breaker_known_closed``, from
history alone) gates its next call on the breaker in the model activity's worker instead
(``ModelCallInput.breaker_gate``), and checks only when that call is turned away or a report changed the breaker.
Runs between :data:`patches.BREAKER_CHECKS_EVERY_CALL` and that patch checked before every agent call.

Runs between :data:`patches.BREAKER_KNOWN_CLOSED` and that patch skipped the check when the previous agent call's
worker had seen the breaker closed with no failures less than ``CLOSED_FRESH_SECONDS`` ago in workflow time
(``vocabulary/breaker.py``; the engine puts that time on the run context, ``workflows/run/model_call.py``), and
they replay that rule. It was a decision by the workflow clock, and a worker that takes up a run may run a task's
code at another clock than the one a replay reads (``tests/test_replay_clock.py``): a run whose check was skipped
by the worker of a ``hartflow status`` command was then replayed with the check, a nondeterminism error
(``tests/test_embedded_stack.py``). The check's answer comes from its worker's cache, so asking costs a local
activity, not a round to the breaker.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from middlewares import patches
from middlewares._activity_call import call_activity
from middlewares._logging import hook_logger
from middlewares.base import ModelRequest
from middlewares.context import ActivityOptions, best_effort
from vocabulary.breaker import BreakerReport, Outcome, still_closed
from vocabulary.contracts import (
    LLM_BREAKER_CHECK,
    LLM_BREAKER_REPORT,
    BreakerCheckInput,
    BreakerCheckResult,
    BreakerReportInput,
)

logger = hook_logger("middlewares.llm_error_handling")

_CHECK_OPTIONS = ActivityOptions(
    start_to_close=timedelta(seconds=15), local=True, retry=RetryPolicy(maximum_attempts=1)
)
_REPORT_OPTIONS = ActivityOptions(
    start_to_close=timedelta(seconds=15),
    local=True,
    retry=RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=3),
)


class BreakerGate:
    """One run's calls to the breaker of its models. ``failure_threshold`` and ``recovery_timeout_sec`` travel
    with every report (the breaker keeps the latest); a probe whose holder vanished is freed after the longest
    its call could take: ``max_attempts`` attempts of the run's model-call timeout, with ``cap_delay_seconds``
    between them."""

    def __init__(
        self, failure_threshold: int, recovery_timeout_sec: float, max_attempts: int, cap_delay_seconds: float
    ) -> None:
        self._failure_threshold = failure_threshold
        self._recovery_timeout_sec = recovery_timeout_sec
        self._max_attempts = max_attempts
        self._cap_delay_seconds = cap_delay_seconds

    def known_closed(self, request: ModelRequest) -> bool:
        """May the call leave the check to its worker: the run last found the breaker closed with no failures."""
        ctx = request.ctx
        return request.model in ctx.breaker_known_closed and ctx.patched(patches.BREAKER_IN_MODEL_CALL)

    def forget_closed(self, request: ModelRequest) -> None:
        request.ctx.breaker_known_closed.discard(request.model)

    async def admit(self, request: ModelRequest, holder: str) -> BreakerCheckResult:
        """May this call go ahead: the check's answer (or, in runs that recorded the old rule, known closed)."""
        ctx = request.ctx
        closed_at = ctx.breaker_closed_at.pop(request.model, None)
        if (
            closed_at is not None
            and not ctx.patched(patches.BREAKER_CHECKS_EVERY_CALL)
            and still_closed(closed_at, ctx.now())
            and ctx.patched(patches.BREAKER_KNOWN_CLOSED)
        ):
            return BreakerCheckResult(admitted=True)
        return await self.check(request, holder)

    async def check(self, request: ModelRequest, holder: str) -> BreakerCheckResult:
        attempts = self._max_attempts
        lease = request.ctx.model_calls.timeout_seconds * attempts + self._cap_delay_seconds * (attempts - 1)
        admission = await best_effort(
            call_activity(
                request.ctx,
                LLM_BREAKER_CHECK,
                BreakerCheckInput(request.model, holder, lease),
                summary="LLMErrorHandling.wrap_model_call · circuit check",
                options=_CHECK_OPTIONS,
            )
        )
        if isinstance(admission, ActivityError):
            # A breaker that cannot be consulted must not stop model calls.
            logger.warning("circuit breaker check failed, admitting the call: %s", admission)
            return BreakerCheckResult(admitted=True)
        return admission

    async def succeeded(self, request: ModelRequest, holder: str, admission: BreakerCheckResult) -> None:
        """The admitted call succeeded: report it when the breaker has something it resets, else the run knows
        the breaker closed with no failures."""
        if admission.report_success:
            await self.report(request, holder, "success")
        else:
            request.ctx.breaker_known_closed.add(request.model)

    async def release_probe(self, request: ModelRequest, holder: str, admission: BreakerCheckResult) -> None:
        if admission.probe:
            await self.report(request, holder, "release")

    async def report(self, request: ModelRequest, holder: str, outcome: Outcome) -> None:
        # What the run knew of the breaker predates this report: the next call asks.
        request.ctx.breaker_closed_at.pop(request.model, None)
        self.forget_closed(request)
        report = BreakerReport(outcome, holder, self._failure_threshold, self._recovery_timeout_sec)
        reported = await best_effort(
            call_activity(
                request.ctx,
                LLM_BREAKER_REPORT,
                BreakerReportInput(request.model, report),
                summary=f"LLMErrorHandling.wrap_model_call · circuit report {outcome}",
                options=_REPORT_OPTIONS,
            )
        )
        if isinstance(reported, ActivityError):
            # A lost report costs one count (or a probe until its lease ends), never the run.
            logger.warning("circuit breaker report %s failed: %s", outcome, reported)
