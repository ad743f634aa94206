"""The per-model circuit breaker as a run asks it (``activities/llm_breaker.py``): may this call go ahead, and
how did it end."""

from __future__ import annotations

from dataclasses import dataclass

from vocabulary.activity_ref import ActivityRef
from vocabulary.breaker import BreakerReport, Phase


@dataclass
class BreakerCheckInput:
    model: str
    holder: str
    """Who would hold the half-open probe: the run and its turn."""
    probe_lease_seconds: float
    """Release the probe after this long if the holder never reports (it vanished)."""


@dataclass
class BreakerCheckResult:
    admitted: bool
    probe: bool = False
    """The caller holds the half-open probe: it must report the outcome, or release the probe."""
    report_success: bool = False
    """The breaker has something a success resets (failures, or a probe), so a success must be reported."""
    phase: Phase = "closed"
    retry_in_seconds: float = 0.0
    """For a denied call: how long until the breaker may admit one again."""


@dataclass
class BreakerReportInput:
    model: str
    report: BreakerReport


LLM_BREAKER_CHECK = ActivityRef("llm_breaker.check", BreakerCheckInput, BreakerCheckResult)
LLM_BREAKER_REPORT = ActivityRef("llm_breaker.report", BreakerReportInput, type(None))
