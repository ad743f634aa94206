"""What every benchmark family shares: the run's context, statistics, unique names, history sizes."""

from __future__ import annotations

import statistics
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType


@dataclass
class BenchContext:
    address: str
    """The dev server this run of the benchmarks started."""
    workdir: Path
    smoke: bool
    repetitions: int
    """Timed runs per measurement (a warm-up run comes first and is not counted)."""
    max_run_seconds: float
    """Budget of one per-turn measurement: repetitions are trimmed to fit it; a run projected past it is skipped."""
    warmup_turns: int
    """Turns of the warm-up run each per-turn session starts with."""
    sticky_queue_timeout_seconds: float | None = None
    """Throughput and recovery: hartflow workers' ``temporal.sticky_queue_timeout_seconds`` (None: the default)."""


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (no interpolation: every reported value is one that was measured)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(pct / 100 * len(ordered) + 0.5)))
    return float(ordered[rank - 1])


def history_totals(histories: Sequence[Sequence[Any]]) -> dict[str, int]:
    """Events and serialized bytes over every run of a workflow (continue-as-new included)."""
    events = [event for history in histories for event in history]
    return {"events": len(events), "bytes": sum(event.ByteSize() for event in events), "runs": len(histories)}


def round_ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def is_event(event: Any, kind: int) -> bool:
    return bool(event.event_type == kind)


ACTIVITY_SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
ACTIVITY_STARTED = EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
