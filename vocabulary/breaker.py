"""The circuit breaker's vocabulary: its workflow's name, id and handlers, its state and the report types.

The breaker workflow (``workflows/circuit_breaker.py``) owns the state; the ``llm_breaker`` activities query,
update and signal it by these names, and LLMErrorHandling (``middlewares/llm_error_handling.py``) builds the
reports. Pure data, so all three import it from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from temporalio.exceptions import ApplicationError

WORKFLOW_NAME = "HartflowCircuitBreaker"
WORKFLOW_ID_PREFIX = "hartflow-breaker-"
STATE_QUERY = "state"
ACQUIRE_UPDATE = "acquire"
REPORT_SIGNAL = "report"

CLOSED_FRESH_SECONDS = 1.0
"""How long a breaker's *closed* answer is trusted by a worker without asking it again, for its checks and its
gated model calls (``activities/llm_breaker.py``)."""
NOT_CLOSED_ERROR = "CircuitNotClosed"
"""The ``ApplicationError`` type of a gated model call (``ModelCallInput.breaker_gate``) that its worker turned
away without calling the provider: the breaker was not closed with no failures."""
CLOSED_AT_KEY = "hartflow_breaker_closed_at"
"""The model answer's ``response_metadata`` key under which, in runs recorded between the patches
``hartflow-breaker-known-closed`` and ``hartflow-breaker-in-model-call``, its worker said when it last saw the
breaker closed with no failures (seconds since the epoch, on the Temporal server's clock). Their replay reads it
(:func:`take_closed_at`); workers no longer write it."""

Phase = Literal["closed", "open", "half_open"]
Outcome = Literal["success", "failure", "release"]


def breaker_workflow_id(model: str) -> str:
    """``openai:gpt-4o`` → ``hartflow-breaker-openai-gpt-4o``: one breaker per provider and model; a ``models``
    entry's name (``gpt-4o``) → ``hartflow-breaker-gpt-4o``."""
    provider, sep, name = model.partition(":")
    return f"{WORKFLOW_ID_PREFIX}{provider}-{name}" if sep else f"{WORKFLOW_ID_PREFIX}{model}"


@dataclass
class BreakerState:
    phase: Phase = "closed"
    failures: int = 0
    """Consecutive exhausted retriable failures (not attempts)."""
    open_until: datetime | None = None
    probe_holder: str | None = None
    probe_until: datetime | None = None
    """When the probe's lease ends if its holder never reports."""
    failure_threshold: int = 5
    recovery_timeout_sec: float = 60.0


@dataclass
class BreakerReport:
    outcome: Outcome
    holder: str
    """Who reports (run and turn): a ``release`` only frees the probe its holder acquired."""
    failure_threshold: int = 5
    recovery_timeout_sec: float = 60.0


@dataclass
class ProbeRequest:
    holder: str
    lease_seconds: float


@dataclass
class Admission:
    admitted: bool
    probe: bool
    """The caller holds the half-open probe and must report its outcome (or release it)."""
    phase: Phase
    retry_at: datetime | None = None
    """For a denied caller: when the breaker may admit a call again."""


def turned_away_by_breaker(error: BaseException) -> bool:
    """Whether a model call's ``ActivityError`` is its worker turning a gated call away (:data:`NOT_CLOSED_ERROR`)."""
    cause = error.__cause__
    return isinstance(cause, ApplicationError) and cause.type == NOT_CLOSED_ERROR


def take_closed_at(metadata: dict[str, Any]) -> datetime | None:
    """Remove :data:`CLOSED_AT_KEY` from a model answer's metadata: when its worker last saw the breaker closed
    with no failures, or ``None`` when it could not vouch for that."""
    seconds = metadata.pop(CLOSED_AT_KEY, None)
    return datetime.fromtimestamp(seconds, UTC) if isinstance(seconds, int | float) else None


def still_closed(closed_at: datetime, now: datetime) -> bool:
    """Whether a closed answer from ``closed_at`` is still fresh at ``now`` (an answer from the future is not:
    clocks that disagree must cost a check, never skip one)."""
    return 0 <= (now - closed_at).total_seconds() < CLOSED_FRESH_SECONDS
