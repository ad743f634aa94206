"""What every benchmark family shares: the run's context, statistics, unique names, history sizes."""

from __future__ import annotations

import os
import statistics
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
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
    server_pid: int | None = None
    """The dev server's guard, which leads the server's process group (its CPU time is read per burst)."""
    worker_tuning: dict[str, Any] = field(default_factory=dict)
    """Throughput: hartflow workers' ``temporal.worker`` keys (``workers/worker_tuning.py``; empty: the defaults)."""


def group_cpu_seconds(group: int | None) -> float:
    """User + system CPU seconds of the live processes in process group ``group`` (the dev server's guard and a
    ``hartflow worker`` lead their groups; a floor worker is the only one in its own), read from ``/proc``; 0 where
    there is no ``/proc``. On a shared machine CPU per run moves much less with the neighbours' load than wall
    time does."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended meanwhile
        if group is not None and int(fields[2]) == group:
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
    return total / os.sysconf("SC_CLK_TCK")


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


FAMILIES = ("per_turn", "history", "throughput", "resume", "recovery")
"""The benchmark families, in the order ``python -m bench`` runs them (history reuses what per_turn measured)."""

ACTIVITY_SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
ACTIVITY_STARTED = EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
