"""Provider-error classification, attempt budgets, Retry-After and jitter (``activities/llm_errors.py``), and the
pure parts of LLMErrorHandling: fallback messages, config → retry policy, the breaker's state machine, and what the
hook tells the breaker (its activities answered in-process)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from email.utils import formatdate
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from temporalio.exceptions import ApplicationError, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

from activities.llm_errors import (
    classify,
    max_attempts_for,
    retry_after_ms,
    retry_delay_ms,
    retry_message,
    to_application_error,
)
from middlewares.base import ModelRequest
from middlewares.llm_error_handling import (
    AUTH_TEXT,
    BURST_TEXT,
    CIRCUIT_OPEN_TEXT,
    QUOTA_TEXT,
    STREAM_DROP_TEXT,
    UNAVAILABLE_TEXT,
    LLMErrorHandlingConfig,
    LLMErrorHandlingMiddleware,
    circuit_open_message,
    describe_failure,
    fallback_message,
    model_retry_policy,
    retry_budget,
)
from tests.support import StubRunContext, activity_error
from vocabulary.breaker import BreakerReport, BreakerState, ProbeRequest, breaker_workflow_id
from vocabulary.contracts import (
    LLM_BREAKER_CHECK,
    LLM_BREAKER_REPORT,
    BreakerCheckInput,
    BreakerCheckResult,
    BreakerReportInput,
    LlmRetryBudget,
)
from vocabulary.state import ThreadState
from workflows.circuit_breaker import Breaker


class Response:
    def __init__(self, status_code: int | None = None, headers: dict[str, str] | None = None) -> None:
        self.status_code = status_code
        self.headers = headers or {}


class ProviderError(Exception):
    """Shaped like the openai SDK's errors: optional status, code, body and a response with headers."""

    def __init__(
        self,
        message: str = "",
        *,
        status_code: int | None = None,
        code: str | None = None,
        body: dict[str, Any] | None = None,
        response: Response | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.code = code
        self.body = body
        self.response = response


def named(name: str, message: str = "", **kwargs: Any) -> Exception:
    """An error whose class is called ``name`` (classification keys on SDK class names)."""
    cls = type(name, (ProviderError,), {})
    error: Exception = cls(message, **kwargs)
    return error


def reason_of(exc: BaseException) -> tuple[bool, str]:
    classified = classify(exc)
    return classified.retriable, classified.reason


# -- classification -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        "insufficient_quota",
        "You exceeded your current QUOTA",
        "billing hard limit",
        "no credit left",
        "payment required",
        "账户余额不足",
        "超出限额",
        "额度不足",
        "账户欠费",
    ],
)
def test_quota_messages_are_not_retriable(message: str) -> None:
    assert reason_of(ProviderError(message, status_code=429)) == (False, "quota")


def test_quota_and_burst_also_match_the_error_code() -> None:
    assert reason_of(ProviderError("slow down", status_code=429, code="insufficient_quota")) == (False, "quota")
    body = {"error": {"message": "x", "type": "limit_burst_rate"}}
    assert reason_of(ProviderError("Too many requests", status_code=429, body=body)) == (True, "burst_rate")
    # Auth and busy look at the message only, as in DeerFlow.
    assert reason_of(ProviderError("boom", status_code=400, code="invalid_api_key")) == (False, "generic")
    assert reason_of(ProviderError("boom", status_code=400, code="server busy")) == (False, "generic")


@pytest.mark.parametrize(
    "message",
    [
        "Authentication failed",
        "401 Unauthorized",
        "Invalid API key provided",
        "invalid_api_key",
        "Permission denied",
        "Forbidden",
        "Access denied for model",
        "无权访问",
        "未授权",
    ],
)
def test_auth_messages_are_not_retriable(message: str) -> None:
    assert reason_of(ProviderError(message, status_code=500)) == (False, "auth")


@pytest.mark.parametrize(
    "message",
    [
        "limit_burst_rate",
        "Request rate increased too quickly",
        "burst rate exceeded",
        "请求速率增长过快",
        "突发速率超限",
    ],
)
def test_burst_rate_messages(message: str) -> None:
    assert reason_of(ProviderError(message, status_code=429)) == (True, "burst_rate")


@pytest.mark.parametrize(
    "name",
    [
        "APITimeoutError",
        "APIConnectionError",
        "InternalServerError",
        "ReadError",
        "RemoteProtocolError",
        "StreamChunkTimeoutError",
    ],
)
def test_transient_class_names(name: str) -> None:
    assert reason_of(named(name, "something odd")) == (True, "transient")


def test_index_error_from_empty_generations_is_transient() -> None:
    assert reason_of(IndexError("list index out of range")) == (True, "transient")


@pytest.mark.parametrize("status", [408, 409, 425, 429, 500, 502, 503, 504])
def test_retriable_statuses(status: int) -> None:
    assert reason_of(ProviderError("nope", status_code=status)) == (True, "transient")


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422, 501])
def test_other_statuses_without_patterns_are_generic(status: int) -> None:
    assert reason_of(ProviderError("nope", status_code=status)) == (False, "generic")


def test_status_is_read_from_status_or_the_response() -> None:
    class WithStatus(Exception):
        status = 503

    assert reason_of(WithStatus("x")) == (True, "transient")
    assert reason_of(ProviderError("x", response=Response(status_code=502))) == (True, "transient")


@pytest.mark.parametrize(
    "message",
    [
        "Server busy",
        "temporarily unavailable",
        "try again later",
        "please retry",
        "Please try again",
        "model overloaded",
        "high demand",
        "rate limit hit",
        "负载较高",
        "服务繁忙",
        "请稍后重试",
        "稍后重试",
    ],
)
def test_busy_messages(message: str) -> None:
    assert reason_of(ProviderError(message, status_code=400)) == (True, "busy")


def test_everything_else_is_generic() -> None:
    assert reason_of(ValueError("bad request body")) == (False, "generic")
    assert reason_of(ConnectionResetError("peer reset")) == (False, "generic")


def test_first_match_wins() -> None:
    # quota before auth before burst before class names before statuses before busy
    assert reason_of(named("InternalServerError", "quota exceeded, unauthorized")) == (False, "quota")
    assert reason_of(ProviderError("unauthorized: burst rate", status_code=503)) == (False, "auth")
    assert reason_of(named("APITimeoutError", "burst rate", status_code=503)) == (True, "burst_rate")
    assert reason_of(ProviderError("server overloaded", status_code=503)) == (True, "transient")
    assert reason_of(ProviderError("server overloaded", status_code=400)) == (True, "busy")


def test_empty_message_falls_back_to_the_message_attribute_then_the_class_name() -> None:
    error = ProviderError("")
    error.message = "please try again"  # type: ignore[attr-defined]
    assert reason_of(error) == (True, "busy")
    assert to_application_error(named("Weird")).message == "Weird"


# -- budgets, Retry-After, jitter -----------------------------------------------------------------------------


def test_attempt_budgets_only_tighten_the_configured_ceiling() -> None:
    assert max_attempts_for("InternalServerError", "transient", 3) == 3
    assert max_attempts_for("StreamChunkTimeoutError", "transient", 3) == 2
    assert max_attempts_for("RateLimitError", "burst_rate", 3) == 2
    assert max_attempts_for("RateLimitError", "burst_rate", 5) == 2
    assert max_attempts_for("StreamChunkTimeoutError", "transient", 1) == 1


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "2"}, 2000),
        ({"retry-after": "0.25"}, 250),
        ({"Retry-After-Ms": "1500", "Retry-After": "9"}, 1500),
        ({"retry-after": "-3"}, 0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "inf"}, None),
        ({}, None),
    ],
)
def test_retry_after_forms(headers: dict[str, str], expected: int | None) -> None:
    assert retry_after_ms(ProviderError("x", response=Response(429, headers))) == expected


def test_retry_after_as_http_date_and_on_the_error_itself() -> None:
    dated = retry_after_ms(ProviderError("x", response=Response(429, {"Retry-After": formatdate(time.time() + 30)})))
    assert dated is not None and 25_000 < dated <= 30_000
    assert retry_after_ms(ProviderError("x", response=Response(429, {"Retry-After": formatdate(0)}))) == 0

    scripted = ProviderError("x", status_code=503)
    scripted.headers = {"retry-after": "0.5"}  # type: ignore[attr-defined]
    assert retry_after_ms(scripted) == 500


def test_jitter_stays_in_deerflow_bounds() -> None:
    budget = LlmRetryBudget()
    for seed in (f"run-{i}" for i in range(200)):
        first = retry_delay_ms(attempt=1, reason="transient", budget=budget, seed=seed)
        assert 1000 <= first <= 3000  # randint(base, min(cap, base * 3))
        second = retry_delay_ms(attempt=2, reason="transient", budget=budget, seed=seed)
        assert 1000 <= second <= min(8000, first * 3)
        burst = retry_delay_ms(attempt=1, reason="burst_rate", budget=budget, seed=seed)
        assert 5000 <= burst <= 8000  # seeded from the burst base, not the normal one


def test_jitter_is_deterministic_per_seed_and_spreads_across_seeds() -> None:
    budget = LlmRetryBudget()
    delays = {retry_delay_ms(attempt=2, reason="busy", budget=budget, seed=f"run-{i}/agent/0") for i in range(50)}
    again = {retry_delay_ms(attempt=2, reason="busy", budget=budget, seed=f"run-{i}/agent/0") for i in range(50)}
    assert delays == again
    assert len(delays) > 10


def test_a_base_above_the_cap_waits_the_cap() -> None:
    budget = LlmRetryBudget(base_delay_ms=9000, cap_delay_ms=8000)
    assert retry_delay_ms(attempt=1, reason="transient", budget=budget, seed="s") == 8000


def test_retry_messages_match_deerflow() -> None:
    assert retry_message(1, 3, 1800, "busy") == "LLM request retry 1/3: provider is busy. Retrying in 2s."
    assert retry_message(2, 3, 40, "transient") == (
        "LLM request retry 2/3: provider request failed temporarily. Retrying in 1s."
    )
    assert retry_message(1, 2, 6400, "burst_rate") == (
        "LLM request retry 1/2: provider is throttling request burst rate. Retrying in 6s."
    )


def test_application_error_retries_within_the_budget_and_stops_at_its_end() -> None:
    budget = LlmRetryBudget(max_attempts=3, base_delay_ms=10, cap_delay_ms=50)
    error = named("InternalServerError", "upstream 503", status_code=503)

    first = to_application_error(error, attempt=1, budget=budget, seed="r")
    assert (first.type, first.message, first.non_retryable) == ("InternalServerError", "upstream 503", False)
    details = first.details[0]
    assert details["reason"] == "transient" and details["retriable"] is True
    assert (details["attempt"], details["max_attempts"], details["status"]) == (1, 3, 503)
    assert 10 <= details["wait_ms"] <= 30
    assert first.next_retry_delay == timedelta(milliseconds=details["wait_ms"])

    last = to_application_error(error, attempt=3, budget=budget, seed="r")
    assert last.non_retryable and last.next_retry_delay is None
    assert last.details[0]["wait_ms"] is None and last.details[0]["retriable"] is True


def test_burst_gets_one_retry_and_retry_after_wins_over_jitter() -> None:
    error = ProviderError("limit_burst_rate", status_code=429, response=Response(429, {"retry-after": "0.3"}))
    first = to_application_error(error, attempt=1)
    assert not first.non_retryable
    assert first.next_retry_delay == timedelta(milliseconds=300)
    assert first.details[0]["max_attempts"] == 2
    assert to_application_error(error, attempt=2).non_retryable


def test_stream_chunk_timeout_gets_one_retry_and_non_retriable_errors_none() -> None:
    stream = named("StreamChunkTimeoutError", "no chunk for 240s")
    assert not to_application_error(stream, attempt=1).non_retryable
    assert to_application_error(stream, attempt=2).non_retryable
    auth = to_application_error(ProviderError("invalid api key", status_code=401), attempt=1)
    assert auth.non_retryable and auth.details[0]["reason"] == "auth" and auth.details[0]["retriable"] is False


# -- fallbacks and config --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "text", "reason"),
    [
        (ProviderError("insufficient_quota", status_code=429), QUOTA_TEXT, "quota"),
        (ProviderError("invalid api key", status_code=401), AUTH_TEXT, "auth"),
        (ProviderError("limit_burst_rate", status_code=429), BURST_TEXT, "burst_rate"),
        (ProviderError("server busy", status_code=400), UNAVAILABLE_TEXT, "busy"),
        (named("InternalServerError", "boom", status_code=500), UNAVAILABLE_TEXT, "transient"),
        (named("StreamChunkTimeoutError", "no chunk"), STREAM_DROP_TEXT, "transient"),
        (
            ProviderError("context length exceeded", status_code=400),
            "LLM request failed: context length exceeded",
            "generic",
        ),
    ],
)
def test_fallback_messages(exc: BaseException, text: str, reason: str) -> None:
    message = fallback_message(describe_failure(activity_error(to_application_error(exc, attempt=3))))
    assert message.content == text
    assert message.additional_kwargs == {
        "deerflow_error_fallback": True,
        "error_type": type(exc).__name__,
        "error_reason": reason,
        "error_detail": str(exc),
    }


def test_failures_without_classification_details() -> None:
    heartbeat = ActivityTimeoutError(
        "activity Heartbeat timeout", type=TimeoutType.HEARTBEAT, last_heartbeat_details=[]
    )
    timeout = describe_failure(activity_error(heartbeat))
    assert (timeout.error_type, timeout.reason, timeout.retriable) == ("TimeoutError", "transient", True)
    script = describe_failure(activity_error(ApplicationError("script x is exhausted", type="ScriptExhaustedError")))
    assert (script.error_type, script.reason, script.retriable) == ("ScriptExhaustedError", "generic", False)
    assert fallback_message(script).content == "LLM request failed: script x is exhausted"


def test_circuit_open_message() -> None:
    message = circuit_open_message()
    assert message.content == CIRCUIT_OPEN_TEXT
    assert message.additional_kwargs == {
        "deerflow_error_fallback": True,
        "error_type": "CircuitBreakerOpen",
        "error_reason": "circuit_open",
        "error_detail": "LLM circuit breaker is open",
    }


def test_config_defaults_and_the_retry_policy_they_make() -> None:
    config = LLMErrorHandlingConfig()
    assert config.model_dump() == {
        "llm_call": {
            "retry_max_attempts": 3,
            "retry_base_delay_ms": 1000,
            "retry_cap_delay_ms": 8000,
            "burst_retry_base_delay_ms": 5000,
        },
        "circuit_breaker": {"failure_threshold": 5, "recovery_timeout_sec": 60, "on_open": "fallback"},
    }
    policy = model_retry_policy(config)
    assert policy.maximum_attempts == retry_budget(config).max_attempts == 3
    assert (policy.initial_interval, policy.maximum_interval) == (timedelta(seconds=1), timedelta(seconds=8))
    with pytest.raises(ValueError, match="extra"):
        LLMErrorHandlingConfig.model_validate({"llm_call": {"retries": 2}})


# -- the breaker's state machine --------------------------------------------------------------------------------

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def report(outcome: str, holder: str = "run-a", threshold: int = 3, recovery: float = 60) -> BreakerReport:
    return BreakerReport(outcome, holder, threshold, recovery)  # type: ignore[arg-type]


def test_breaker_opens_after_consecutive_failures_and_a_success_resets_the_count() -> None:
    breaker = Breaker(BreakerState())
    breaker.report(report("failure"), T0)
    breaker.report(report("failure"), T0)
    breaker.report(report("success"), T0)
    assert (breaker.state.phase, breaker.state.failures) == ("closed", 0)
    for _ in range(3):
        assert breaker.acquire(ProbeRequest("run-x", 10), T0).admitted
        breaker.report(report("failure"), T0)
    assert breaker.state.phase == "open"
    denied = breaker.acquire(ProbeRequest("run-x", 10), T0 + timedelta(seconds=59))
    assert (denied.admitted, denied.phase, denied.retry_at) == (False, "open", T0 + timedelta(seconds=60))
    assert breaker.next_deadline() == T0 + timedelta(seconds=60)


def test_half_open_admits_one_probe_and_its_outcome_decides() -> None:
    breaker = Breaker(BreakerState())
    for _ in range(3):
        breaker.report(report("failure"), T0)
    later = T0 + timedelta(seconds=60)
    probe = breaker.acquire(ProbeRequest("run-a", 30), later)
    assert (probe.admitted, probe.probe, probe.phase) == (True, True, "half_open")
    assert breaker.acquire(ProbeRequest("run-a", 30), later).probe, "the holder asking again keeps its probe"
    other = breaker.acquire(ProbeRequest("run-b", 30), later)
    assert (other.admitted, other.phase, other.retry_at) == (False, "half_open", later + timedelta(seconds=5))

    breaker.report(report("failure", "run-a"), later)  # the probe failed: open again for a full cooldown
    assert (breaker.state.phase, breaker.state.open_until) == ("open", later + timedelta(seconds=60))

    again = later + timedelta(seconds=60)
    assert breaker.acquire(ProbeRequest("run-b", 30), again).probe
    breaker.report(report("success", "run-b"), again)
    assert breaker.state == BreakerState(failure_threshold=3, recovery_timeout_sec=60)


def test_release_frees_only_the_holders_probe_and_never_trips() -> None:
    breaker = Breaker(BreakerState(phase="half_open", failure_threshold=1))
    assert breaker.acquire(ProbeRequest("run-a", 30), T0).probe
    breaker.report(report("release", "run-b", threshold=1), T0)
    assert breaker.state == BreakerState("half_open", 0, None, "run-a", T0 + timedelta(seconds=30), 1)
    breaker.report(report("release", "run-a", threshold=1), T0)
    assert breaker.state == BreakerState("half_open", 0, None, None, None, 1)


def test_a_vanished_probe_is_freed_when_its_lease_ends() -> None:
    breaker = Breaker(BreakerState(phase="half_open"))
    assert breaker.acquire(ProbeRequest("run-a", 30), T0).probe
    assert breaker.next_deadline() == T0 + timedelta(seconds=30)
    assert not breaker.acquire(ProbeRequest("run-b", 30), T0 + timedelta(seconds=29)).admitted
    assert breaker.acquire(ProbeRequest("run-b", 30), T0 + timedelta(seconds=30)).probe


def test_a_late_failure_while_open_extends_the_cooldown() -> None:
    breaker = Breaker(BreakerState())
    for _ in range(3):
        breaker.report(report("failure"), T0)
    breaker.report(report("failure"), T0 + timedelta(seconds=10))
    assert breaker.state.open_until == T0 + timedelta(seconds=70)


def test_breaker_ids_name_provider_and_model() -> None:
    assert breaker_workflow_id("openai:gpt-4o-mini") == "hartflow-breaker-openai-gpt-4o-mini"


# -- the hook, with its activities answered in-process ---------------------------------------------------------


class Breakerless:
    """Answers the breaker activities like a breaker would, and records the reports."""

    def __init__(self, check: BreakerCheckResult) -> None:
        self.check_result = check
        self.reports: list[str] = []

    async def check(self, _: BreakerCheckInput) -> BreakerCheckResult:
        return self.check_result

    async def report(self, input: BreakerReportInput) -> None:
        self.reports.append(input.report.outcome)

    def context(self) -> StubRunContext:
        return StubRunContext(activities={LLM_BREAKER_CHECK: self.check, LLM_BREAKER_REPORT: self.report})


def model_request(ctx: StubRunContext) -> ModelRequest:
    return ModelRequest([HumanMessage("hi")], None, [], ThreadState(), ctx, "openai:gpt-4o-mini")


def failing_with(exc: BaseException) -> Callable[[ModelRequest], Awaitable[AIMessage]]:
    async def handler(_: ModelRequest) -> AIMessage:
        raise activity_error(to_application_error(exc, attempt=3))

    return handler


async def answering(_: ModelRequest) -> AIMessage:
    return AIMessage("fine")


async def test_a_closed_breaker_is_consulted_once_and_never_told_about_healthy_calls() -> None:
    breaker = Breakerless(BreakerCheckResult(admitted=True))
    ctx = breaker.context()
    reply = await LLMErrorHandlingMiddleware().wrap_model_call(model_request(ctx), answering)
    assert reply.content == "fine"
    assert [(name, summary) for name, _, summary in ctx.calls] == [
        (LLM_BREAKER_CHECK, "LLMErrorHandling.wrap_model_call · circuit check")
    ]
    check = ctx.calls[0][1]
    assert (check.model, check.holder) == ("openai:gpt-4o-mini", "hartflow:default:thread-1/run-1/turn-0")
    assert check.probe_lease_seconds == 600 * 3 + 8 * 2


@pytest.mark.parametrize(
    ("check", "outcome", "expected"),
    [
        (BreakerCheckResult(admitted=True), answering, []),
        (BreakerCheckResult(admitted=True, report_success=True), answering, ["success"]),
        (BreakerCheckResult(admitted=True, probe=True, report_success=True), answering, ["success"]),
        (BreakerCheckResult(admitted=True), failing_with(named("APIConnectionError", "reset")), ["failure"]),
        (BreakerCheckResult(admitted=True), failing_with(ProviderError("invalid api key", status_code=401)), []),
        (
            BreakerCheckResult(admitted=True, probe=True),
            failing_with(ProviderError("invalid api key", status_code=401)),
            ["release"],
        ),
        (
            BreakerCheckResult(admitted=True, probe=True),
            failing_with(ProviderError("limit_burst_rate", status_code=429)),
            ["release"],
        ),
    ],
)
async def test_what_the_breaker_is_told(
    check: BreakerCheckResult, outcome: Callable[[ModelRequest], Awaitable[AIMessage]], expected: list[str]
) -> None:
    breaker = Breakerless(check)
    await LLMErrorHandlingMiddleware().wrap_model_call(model_request(breaker.context()), outcome)
    assert breaker.reports == expected


async def test_an_open_breaker_answers_without_calling_the_model() -> None:
    breaker = Breakerless(BreakerCheckResult(admitted=False, phase="open", retry_in_seconds=42))
    called: list[ModelRequest] = []

    async def model(request: ModelRequest) -> AIMessage:
        called.append(request)
        return AIMessage("no")

    reply = await LLMErrorHandlingMiddleware().wrap_model_call(model_request(breaker.context()), model)
    assert reply.content == CIRCUIT_OPEN_TEXT and not called and not breaker.reports


async def test_cancellation_releases_the_probe_and_propagates() -> None:
    breaker = Breakerless(BreakerCheckResult(admitted=True, probe=True))

    async def cancelled(_: ModelRequest) -> AIMessage:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await LLMErrorHandlingMiddleware().wrap_model_call(model_request(breaker.context()), cancelled)
    assert breaker.reports == ["release"]


async def test_an_unreachable_breaker_admits_the_call() -> None:
    async def broken(_: BreakerCheckInput) -> BreakerCheckResult:
        raise activity_error(ApplicationError("local activity timed out"))

    ctx = StubRunContext(activities={LLM_BREAKER_CHECK: broken})
    reply = await LLMErrorHandlingMiddleware().wrap_model_call(model_request(ctx), answering)
    assert reply.content == "fine"
