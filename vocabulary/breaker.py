"""The circuit breaker's vocabulary: its workflow's name, id and handlers, its state and the report types.

The breaker workflow (``workflows/circuit_breaker.py``) owns the state; the ``llm_breaker`` activities query,
update and signal it by these names, and LLMErrorHandling (``middlewares/llm_error_handling.py``) builds the
reports. Pure data, so all three import it from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

WORKFLOW_NAME = "HartflowCircuitBreaker"
WORKFLOW_ID_PREFIX = "hartflow-breaker-"
STATE_QUERY = "state"
ACQUIRE_UPDATE = "acquire"
REPORT_SIGNAL = "report"

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
