"""How a model provider's exception becomes a Temporal failure: the one place that decides retries.

The ``model.invoke`` activity makes one provider request per attempt and turns every provider error into an
``ApplicationError`` here. Temporal's retry policy then does what DeerFlow's ``LLMErrorHandlingMiddleware``
did in-process (``bytedance/deer-flow:
backend/packages/harness/deerflow/agents/middlewares/llm_error_handling_middleware.py``):

* :func:`classify` is DeerFlow's ``_classify_error``, first match wins: quota (message or error code) and
  auth (message) are non-retriable; burst-rate (message or code) is retriable with its own budget and base
  delay; known transient class names (the class's or a base class's: langchain-openai subclasses the SDK's),
  ``IndexError`` (an empty ``generations`` list) and the statuses 408 409 425 429 500 502 503 504 are
  ``transient``; busy-provider messages are ``busy``; the rest is
  non-retriable ``generic``.
* A retry policy is per activity call, not per reason, so the activity enforces the per-reason attempt budget
  itself (:func:`max_attempts_for`): past it the error is raised ``non_retryable``. The workflow's
  ``maximum_attempts`` is the configured ceiling, so the two never disagree.
* The wait before the next attempt travels as ``next_retry_delay``: the provider's ``Retry-After-Ms`` /
  ``Retry-After`` verbatim, else DeerFlow's decorrelated jitter, drawn from a generator seeded by (run, call,
  attempt) so that every worker computes the same delay for the same attempt (:func:`retry_delay_ms`).

The ``ApplicationError`` keeps the provider's class name as ``type`` and its message, and carries one details
dict: ``reason``, ``retriable``, ``attempt``, ``max_attempts``, ``wait_ms`` (``None`` when no retry follows)
and ``status``. The LLMErrorHandling middleware reads them to pick DeerFlow's fallback message.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.exceptions import ApplicationError

from vocabulary.contracts import LlmRetryBudget

__all__ = [
    "RETRIABLE_STATUS_CODES",
    "Classified",
    "classify",
    "error_detail",
    "max_attempts_for",
    "retry_after_ms",
    "retry_delay_ms",
    "retry_message",
    "to_application_error",
]

RETRIABLE_STATUS_CODES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})

_QUOTA_PATTERNS = (
    "insufficient_quota",
    "quota",
    "billing",
    "credit",
    "payment",
    "余额不足",
    "超出限额",
    "额度不足",
    "欠费",
)
_AUTH_PATTERNS = (
    "authentication",
    "unauthorized",
    "invalid api key",
    "invalid_api_key",
    "permission",
    "forbidden",
    "access denied",
    "无权",
    "未授权",
)
_BURST_PATTERNS = ("limit_burst_rate", "rate increased too quickly", "burst rate", "请求速率增长过快", "突发速率")
_BUSY_PATTERNS = (
    "server busy",
    "temporarily unavailable",
    "try again later",
    "please retry",
    "please try again",
    "overloaded",
    "high demand",
    "rate limit",
    "负载较高",
    "服务繁忙",
    "稍后重试",
    "请稍后重试",
)
_TRANSIENT_CLASS_NAMES = frozenset(
    {
        "APITimeoutError",
        "APIConnectionError",
        "InternalServerError",
        "ReadError",  # httpx: the connection dropped mid-stream
        "RemoteProtocolError",  # httpx: the server closed the connection unexpectedly
        "StreamChunkTimeoutError",  # langchain-openai: the gap between chunks exceeded stream_chunk_timeout
    }
)

# Budgets can only tighten ``retry_max_attempts``; values are total attempts (2 = one retry).
# A StreamChunkTimeoutError already stalled for minutes upstream, and retrying a burst-rate 429 adds demand
# to the very slope being throttled: both get exactly one retry.
_CLASS_ATTEMPT_BUDGETS = {"StreamChunkTimeoutError": 2}
_REASON_ATTEMPT_BUDGETS = {"burst_rate": 2}

_RETRY_REASON_TEXT = {"busy": "provider is busy", "burst_rate": "provider is throttling request burst rate"}


@dataclass(frozen=True)
class Classified:
    retriable: bool
    reason: str
    """``quota``, ``auth``, ``burst_rate``, ``transient``, ``busy`` or ``generic``."""


def classify(exc: BaseException) -> Classified:
    """DeerFlow's ``_classify_error``: the first matching rule decides."""
    lowered = error_detail(exc).lower()
    code = str(_error_code(exc)).lower()
    if _matches(lowered, _QUOTA_PATTERNS) or _matches(code, _QUOTA_PATTERNS):
        return Classified(False, "quota")
    if _matches(lowered, _AUTH_PATTERNS):
        return Classified(False, "auth")
    if _matches(lowered, _BURST_PATTERNS) or _matches(code, _BURST_PATTERNS):
        return Classified(True, "burst_rate")
    if _TRANSIENT_CLASS_NAMES & _class_names(exc) or isinstance(exc, IndexError):
        return Classified(True, "transient")
    if _status(exc) in RETRIABLE_STATUS_CODES:
        return Classified(True, "transient")
    if _matches(lowered, _BUSY_PATTERNS):
        return Classified(True, "busy")
    return Classified(False, "generic")


def max_attempts_for(error_type: str, reason: str, configured: int) -> int:
    """Total attempts for this error: the configured ceiling, tightened by the class and reason budgets."""
    candidates = [configured]
    if error_type in _CLASS_ATTEMPT_BUDGETS:
        candidates.append(_CLASS_ATTEMPT_BUDGETS[error_type])
    if reason in _REASON_ATTEMPT_BUDGETS:
        candidates.append(_REASON_ATTEMPT_BUDGETS[reason])
    return min(candidates)


def retry_delay_ms(*, attempt: int, reason: str, budget: LlmRetryBudget, seed: str) -> int:
    """The jittered wait after failed attempt ``attempt`` (1-based), as DeerFlow's ``_build_retry_delay_ms``.

    Decorrelated jitter: ``randint(base, min(cap, max(base, previous * 3)))``, the first draw seeded from the
    reason's base (burst-rate uses its longer base). DeerFlow keeps ``previous`` in a local variable of its
    retry loop; an activity attempt cannot see the one before it, so the chain is replayed from attempt 1 with
    one generator per attempt seeded from ``seed`` (run and call) and the attempt number. Different runs still
    spread out, and the same attempt always gets the same delay, whichever worker runs it.
    """
    base = budget.burst_base_delay_ms if reason == "burst_rate" else budget.base_delay_ms
    cap = budget.cap_delay_ms
    previous = base
    delay = base
    for step in range(1, attempt + 1):
        high = min(cap, max(base, previous * 3))
        # A base above the cap is a misconfiguration: the cap wins, as in DeerFlow.
        delay = cap if high < base else random.Random(f"{seed}/{step}").randint(base, high)
        previous = delay
    return delay


def retry_message(attempt: int, max_attempts: int, wait_ms: int, reason: str) -> str:
    """The ``message`` of DeerFlow's ``llm_retry`` stream event."""
    seconds = max(1, round(wait_ms / 1000))
    reason_text = _RETRY_REASON_TEXT.get(reason, "provider request failed temporarily")
    return f"LLM request retry {attempt}/{max_attempts}: {reason_text}. Retrying in {seconds}s."


def to_application_error(
    exc: BaseException, *, attempt: int = 1, budget: LlmRetryBudget | None = None, seed: str = ""
) -> ApplicationError:
    """Classify a provider exception raised by attempt ``attempt`` into the failure Temporal acts on."""
    budget = budget or LlmRetryBudget()
    error_type = type(exc).__name__
    classified = classify(exc)
    max_attempts = max_attempts_for(error_type, classified.reason, budget.max_attempts)
    retry = classified.retriable and attempt < max_attempts
    wait_ms: int | None = None
    if retry:
        wait_ms = retry_after_ms(exc)
        if wait_ms is None:
            wait_ms = retry_delay_ms(attempt=attempt, reason=classified.reason, budget=budget, seed=seed)
    return ApplicationError(
        error_detail(exc),
        {
            "reason": classified.reason,
            "retriable": classified.retriable,
            "attempt": attempt,
            "max_attempts": max_attempts,
            "wait_ms": wait_ms,
            "status": _status(exc),
        },
        type=error_type,
        non_retryable=not retry,
        next_retry_delay=None if wait_ms is None else timedelta(milliseconds=wait_ms),
    )


def error_detail(exc: BaseException) -> str:
    """DeerFlow's ``_extract_error_detail``: the message, else a ``message`` attribute, else the class name."""
    detail = str(exc).strip()
    if detail:
        return detail
    message = getattr(exc, "message", None)
    if isinstance(message, str) and message.strip():
        return message.strip()
    return type(exc).__name__


def retry_after_ms(exc: BaseException) -> int | None:
    """Milliseconds the provider asked us to wait (``Retry-After-Ms``, else ``Retry-After`` in seconds or as an
    HTTP date), or ``None`` when it gave no usable hint."""
    headers = _headers(exc)
    for name, multiplier in (("retry-after-ms", 1), ("retry-after", 1000)):
        raw = headers.get(name)
        if not raw:
            continue
        try:
            value = float(raw) * multiplier
        except ValueError:
            return _http_date_ms(raw)
        return max(0, int(value)) if math.isfinite(value) else None
    return None


def _http_date_ms(raw: str) -> int | None:
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0, int((when.timestamp() - time.time()) * 1000))


def _class_names(exc: BaseException) -> set[str]:
    """The names of the exception's class and its bases. langchain-openai re-raises the SDK's errors as its own
    subclasses (``OpenAITimeoutError(openai.APITimeoutError)``, ``OpenAIConnectionError``), whose own names
    DeerFlow's by-name rule would miss: a timeout would end the call instead of being retried."""
    return {cls.__name__ for cls in type(exc).__mro__}


def _matches(text: str, patterns: tuple[str, ...]) -> bool:
    return any(pattern in text for pattern in patterns)


def _error_code(exc: BaseException) -> Any:
    for attribute in ("code", "error_code"):
        value = getattr(exc, attribute, None)
        if value not in (None, ""):
            return value
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(error := body.get("error"), dict):
        for key in ("code", "type"):
            value = error.get(key)
            if value not in (None, ""):
                return value
    return None


def _status(exc: BaseException) -> int | None:
    for attribute in ("status_code", "status"):
        value = getattr(exc, attribute, None)
        if isinstance(value, int):
            return value
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def _headers(exc: BaseException) -> Mapping[str, str]:
    """Lower-cased response headers: SDK errors keep them on ``response``, scripted errors on the error."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        headers = getattr(exc, "headers", None)
    if not isinstance(headers, Mapping):
        return {}
    return {str(key).lower(): str(value) for key, value in headers.items()}
