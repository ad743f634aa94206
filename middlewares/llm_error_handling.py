"""LLMErrorHandling: DeerFlow's model-call safety net — retries, fallbacks, and a circuit breaker shared by all workers.

Hook
* ``wrap_model_call``: consults the circuit breaker, calls the model, and when the call failed for good returns
  DeerFlow's fallback ``AIMessage`` (``deerflow_error_fallback``, ``error_type``, ``error_reason``,
  ``error_detail``) instead of raising. The fallback becomes the model's reply in **thread state**, and the run
  ends with status ``error`` (``workflows/run/view.py`` maps a trailing fallback message to it), not as a failed
  workflow. Cancellation is never swallowed; the clarification pause is not a model-call error and never
  reaches this hook.
* Circuit breaker: a **side effect** through two local activities (``llm_breaker.check`` before the call,
  ``llm_breaker.report`` after it, only when there is something to change). Open, it answers with DeerFlow's
  circuit-open fallback, or with ``on_open: wait`` emits an ``llm_circuit_wait`` progress event and sleeps on a
  workflow timer until the breaker may admit a probe.

Retries do not happen in this hook. DeerFlow loops around the handler; here the model activity is retried by
Temporal, so every attempt is an activity attempt visible in the Web UI. ``activities/llm_errors.py``
classifies each failure and enforces the per-reason budget; this module turns the config into the activity's
retry policy (:func:`model_retry_policy`) and budget (:func:`retry_budget`), which the run's model-call policy
carries (``RunSettings.model_call_policy``) to every model call. The activity signals the run before each retry
and the run records DeerFlow's ``llm_retry`` progress event (``workflows/run/model_call.py``).

Where the breaker is consulted: in the workflow, before the model activity is scheduled, unless the run knows it
closed. An open breaker then answers without any model activity (as in DeerFlow, the handler is not called),
``on_open: wait`` is a durable workflow timer, and the run — which always learns the final outcome, timeouts and
worker crashes included — owns the half-open probe. Consulting only inside the model activity could not skip
scheduling the activity, could not wait on a timer, and would leave a probe stranded when its worker dies mid-call.
The check is a local activity (one ``MarkerRecorded`` event and one more workflow-task round before the call), so a
run that found the breaker closed with no failures — by its check, or by its previous call going through — leaves
the next check to the call itself (``breaker_gate``, deterministic: the run's knowledge comes from its history).
The model activity's worker then asks its own view of the breaker (shared by its calls, refreshed once a second:
``activities/llm_breaker.py``) and, unless it is closed with no failures, turns the call away without calling the
provider; the run forgets what it knew, checks, and calls the handler again (the inner middlewares run again, as
they do for every retry in DeerFlow's own loop). An open breaker therefore costs a run at most one turned-away
activity, when it opened since the run's last call; a closed one costs nothing after the run's first call.

Per-run memory: none. Settings: :class:`LLMErrorHandlingConfig` (DeerFlow's ``llm_call`` and
``circuit_breaker`` sections). DeerFlow's process-wide ``max_concurrent_calls`` limiter is not reproduced: a
worker's ``max_concurrent_activities`` or a task-queue rate limit bounds in-flight model calls here.

Parts: the breaker's side in ``middlewares/_breaker_gate.py``: the contract ``vocabulary/contracts/llm_breaker.py``
(``LLM_BREAKER_CHECK``, ``LLM_BREAKER_REPORT``) and its activities ``activities/llm_breaker.py``; the breaker
workflow ``workflows/circuit_breaker.py`` and its vocabulary ``vocabulary/breaker.py``; the classifier and retry
budget in ``activities/llm_errors.py``, applied by the model activity ``activities/model.py``; the retry policy
wired by ``middlewares/run_settings.py`` and used, with the ``llm_retry`` signal, by
``workflows/run/model_call.py``. Tests: ``tests/test_llm_error_handling.py``, ``tests/test_llm_errors.py``,
``tests/test_faults.py``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from langchain_core.messages import AIMessage
from pydantic import BaseModel, ConfigDict, Field
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

from middlewares._breaker_gate import BreakerGate
from middlewares.base import Middleware, ModelHandler, ModelRequest
from vocabulary.breaker import turned_away_by_breaker
from vocabulary.contracts import BreakerCheckResult, LlmRetryBudget

QUOTA_TEXT = (
    "The configured LLM provider rejected the request because the account is out of quota, billing is "
    "unavailable, or usage is restricted. Please fix the provider account and try again."
)
AUTH_TEXT = (
    "The configured LLM provider rejected the request because authentication or access is invalid. Please check "
    "the provider credentials and try again."
)
BURST_TEXT = (
    "The configured LLM provider is temporarily throttling requests because the request rate increased too "
    "quickly (burst-rate limit). Please wait a moment and try again."
)
STREAM_DROP_TEXT = (
    "The model's streaming response was interrupted before it could finish. This usually happens when a single "
    "response or tool call is very large — please ask the assistant to split the work into smaller steps, or "
    "shorten the requested output, and try again."
)
UNAVAILABLE_TEXT = (
    "The configured LLM provider is temporarily unavailable after multiple retries. Please wait a moment and "
    "continue the conversation."
)
CIRCUIT_OPEN_TEXT = (
    "The configured LLM provider is currently unavailable due to continuous failures. Circuit breaker is engaged "
    "to protect the system. Please wait a moment before trying again."
)

# Only this class gets the "split the work" advice: plain connection drops happen with normal payloads too.
_STREAM_DROP_ERRORS = frozenset({"StreamChunkTimeoutError"})
_MIN_WAIT = timedelta(milliseconds=100)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LlmCallConfig(_Strict):
    retry_max_attempts: int = Field(default=3, ge=1, description="total attempts of one model call, the first included")
    retry_base_delay_ms: int = Field(
        default=1000, ge=1, description="decorrelated-jitter base when there is no Retry-After"
    )
    retry_cap_delay_ms: int = Field(default=8000, ge=1, description="longest jittered wait between attempts")
    burst_retry_base_delay_ms: int = Field(default=5000, ge=1, description="jitter base for burst-rate throttling")


class CircuitBreakerConfig(_Strict):
    failure_threshold: int = Field(default=5, ge=1, description="consecutive exhausted retriable calls that open it")
    recovery_timeout_sec: float = Field(default=60, gt=0, description="how long it stays open before one probe")
    on_open: Literal["fallback", "wait"] = Field(
        default="fallback",
        description="answer at once with DeerFlow's message, or wait durably for the cooldown and probe",
    )


class LLMErrorHandlingConfig(_Strict):
    llm_call: LlmCallConfig = Field(default_factory=LlmCallConfig)
    circuit_breaker: CircuitBreakerConfig = Field(default_factory=CircuitBreakerConfig)


def retry_budget(config: LLMErrorHandlingConfig) -> LlmRetryBudget:
    call = config.llm_call
    return LlmRetryBudget(
        max_attempts=call.retry_max_attempts,
        base_delay_ms=call.retry_base_delay_ms,
        cap_delay_ms=call.retry_cap_delay_ms,
        burst_base_delay_ms=call.burst_retry_base_delay_ms,
    )


def model_retry_policy(config: LLMErrorHandlingConfig) -> RetryPolicy:
    """The model activity's retry policy. The activity sets ``next_retry_delay`` on every error it lets Temporal
    retry, so the intervals here only pace retries after timeouts (a hung provider, a dead worker)."""
    call = config.llm_call
    return RetryPolicy(
        initial_interval=timedelta(milliseconds=call.retry_base_delay_ms),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(milliseconds=max(call.retry_base_delay_ms, call.retry_cap_delay_ms)),
        maximum_attempts=call.retry_max_attempts,
    )


@dataclass(frozen=True)
class ModelFailure:
    """A model call that failed for good, as DeerFlow's fallback describes it."""

    error_type: str
    reason: str
    retriable: bool
    detail: str


def describe_failure(error: ActivityError) -> ModelFailure:
    """Read the classification ``activities/llm_errors.py`` put in the failure's details."""
    cause = error.cause
    if isinstance(cause, ApplicationError):
        details = cause.details[0] if cause.details and isinstance(cause.details[0], dict) else {}
        return ModelFailure(
            cause.type or "ApplicationError",
            str(details.get("reason", "generic")),
            bool(details.get("retriable", False)),
            cause.message,
        )
    if isinstance(cause, ActivityTimeoutError):
        # The provider hung (or the worker died) on every attempt: DeerFlow's APITimeoutError, i.e. transient.
        return ModelFailure("TimeoutError", "transient", True, cause.message)
    return ModelFailure(type(cause or error).__name__, "generic", False, str(cause or error))


def fallback_message(failure: ModelFailure) -> AIMessage:
    if failure.reason == "quota":
        text = QUOTA_TEXT
    elif failure.reason == "auth":
        text = AUTH_TEXT
    elif failure.reason == "burst_rate":
        text = BURST_TEXT
    elif failure.reason in ("busy", "transient"):
        text = STREAM_DROP_TEXT if failure.error_type in _STREAM_DROP_ERRORS else UNAVAILABLE_TEXT
    else:
        text = f"LLM request failed: {failure.detail}"
    return _fallback(text, failure)


def circuit_open_message() -> AIMessage:
    failure = ModelFailure("CircuitBreakerOpen", "circuit_open", False, "LLM circuit breaker is open")
    return _fallback(CIRCUIT_OPEN_TEXT, failure)


def _fallback(text: str, failure: ModelFailure) -> AIMessage:
    return AIMessage(
        content=text,
        additional_kwargs={
            "deerflow_error_fallback": True,
            "error_type": failure.error_type,
            "error_reason": failure.reason,
            "error_detail": failure.detail,
        },
    )


class LLMErrorHandlingMiddleware(Middleware):
    def __init__(self, config: LLMErrorHandlingConfig | None = None) -> None:
        self.config = config = config or LLMErrorHandlingConfig()
        breaker, call = config.circuit_breaker, config.llm_call
        self._breaker = BreakerGate(
            breaker.failure_threshold,
            breaker.recovery_timeout_sec,
            call.retry_max_attempts,
            call.retry_cap_delay_ms / 1000,
        )

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AIMessage:
        ctx, breaker = request.ctx, self._breaker
        holder = f"{ctx.workflow_id}/{ctx.run_id}/turn-{ctx.turn}"
        if breaker.known_closed(request):
            try:
                return await self._call(request.override(breaker_gate=True), handler, holder, _UNCHECKED)
            except _TurnedAway:
                pass  # the breaker changed since this run's last call: ask it, as a run that knows nothing does
        admission = await breaker.admit(request, holder)
        while not admission.admitted:
            if self.config.circuit_breaker.on_open == "fallback":
                return circuit_open_message()
            wait = max(timedelta(seconds=admission.retry_in_seconds), _MIN_WAIT)
            ctx.emit("llm_circuit_wait", phase=admission.phase, wait_ms=int(wait.total_seconds() * 1000))
            await workflow.sleep(wait, summary="LLMErrorHandling.wrap_model_call · circuit open, waiting")
            admission = await breaker.check(request, holder)
        return await self._call(request, handler, holder, admission)

    async def _call(
        self, request: ModelRequest, handler: ModelHandler, holder: str, admission: BreakerCheckResult
    ) -> AIMessage:
        """The admitted call, its outcome reported to the breaker as ``admission`` asks; a failure for good becomes
        DeerFlow's fallback message. A gated call its worker turned away raises :class:`_TurnedAway`."""
        breaker = self._breaker
        try:
            response = await handler(request)
        except ActivityError as error:
            if is_cancelled_exception(error):
                await breaker.release_probe(request, holder, admission)
                raise
            if turned_away_by_breaker(error):
                breaker.forget_closed(request)
                raise _TurnedAway from None
            failure = describe_failure(error)
            # Burst-rate exhaustion is the provider shedding a ramp, not the provider being down: never trip.
            if failure.retriable and failure.reason != "burst_rate":
                await breaker.report(request, holder, "failure")
            else:
                await breaker.release_probe(request, holder, admission)
            return fallback_message(failure)
        except (Exception, asyncio.CancelledError):
            # Never wider: an eviction or a collected orphan (BaseExceptions) must end the run untouched.
            await breaker.release_probe(request, holder, admission)
            raise
        await breaker.succeeded(request, holder, admission)
        return response


class _TurnedAway(Exception):
    """A gated model call found the breaker not closed: the provider was not called."""


_UNCHECKED = BreakerCheckResult(admitted=True)
"""A call gated on the breaker in its worker: nothing to release or report on success."""
