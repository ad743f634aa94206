"""How a model provider's exception becomes a Temporal failure: the one place that decides retries.

The ``model.invoke`` activity turns every provider error into an ``ApplicationError`` here, and
Temporal's retry policy then does what DeerFlow's ``LLMErrorHandlingMiddleware`` did in-process:
``non_retryable`` stops retries, ``next_retry_delay`` replaces the policy's backoff for one attempt.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from temporalio.exceptions import ApplicationError

__all__ = ["NON_RETRYABLE_STATUSES", "to_application_error"]

NON_RETRYABLE_STATUSES = frozenset({400, 401, 403, 404, 422})
"""Request or credential problems: the same request will fail the same way on every attempt."""


def to_application_error(exc: BaseException) -> ApplicationError:
    """Classify a provider exception as a retryable or non-retryable ``ApplicationError``.

    For now: HTTP statuses in :data:`NON_RETRYABLE_STATUSES` are non-retryable, everything else is
    retryable; a Retry-After hint (the exception's ``retry_after`` attribute, else its
    ``retry-after-ms`` / ``retry-after`` header, seconds or HTTP date) becomes ``next_retry_delay``.
    ``type`` is the exception's class name and the details are ``{"status", "retry_after"}``.

    The full DeerFlow classification belongs here too, so that the workflow and the retry policy never
    look at provider exceptions themselves: quota and auth message/code patterns (non-retryable),
    burst-rate throttling (retryable, longer base delay, one retry), transient class names and statuses,
    busy-provider messages, and the generic non-retryable fallback
    (see ``LLMErrorHandlingMiddleware`` in ``deerflow-runtime.md``).
    """
    status = _status(exc)
    retry_after = _retry_after(exc)
    return ApplicationError(
        str(exc) or type(exc).__name__,
        {"status": status, "retry_after": retry_after},
        type=type(exc).__name__,
        non_retryable=status in NON_RETRYABLE_STATUSES,
        next_retry_delay=None if retry_after is None else timedelta(seconds=retry_after),
    )


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def _headers(exc: BaseException) -> Mapping[str, str]:
    """Lower-cased response headers: scripted errors carry ``headers``, openai's ``response.headers``."""
    headers = getattr(exc, "headers", None)
    if headers is None:
        headers = getattr(getattr(exc, "response", None), "headers", None)
    if not isinstance(headers, Mapping):
        return {}
    return {str(key).lower(): str(value) for key, value in headers.items()}


def _retry_after(exc: BaseException) -> float | None:
    """Seconds the provider asked us to wait, or ``None`` when it gave no (usable) hint."""
    attribute: Any = getattr(exc, "retry_after", None)
    if isinstance(attribute, int | float) and not isinstance(attribute, bool):
        return _usable(float(attribute))
    headers = _headers(exc)
    if "retry-after-ms" in headers:
        millis = _number(headers["retry-after-ms"])
        if millis is not None:
            return _usable(millis / 1000)
    if "retry-after" in headers:
        value = headers["retry-after"]
        seconds = _number(value)
        if seconds is not None:
            return _usable(seconds)
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())
    return None


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _usable(seconds: float) -> float | None:
    return seconds if math.isfinite(seconds) and seconds >= 0 else None
