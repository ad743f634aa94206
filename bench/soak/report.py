"""The soak's result and its markdown table (for the README)."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

from bench.soak.chaos import FAULT_KINDS, Fault
from bench.soak.scenarios import Scenario


@dataclass
class SoakResult:
    minutes: float
    seed: int
    scenarios: list[Scenario]
    faults: list[Fault]
    problems: dict[str, list[str]]
    """Per check, what did not hold (every list empty: the soak is green)."""
    consumers: int = 0
    reconnects: int = 0
    histories: int = 0
    attempt_failures: Counter[str] = field(default_factory=Counter)
    """Activity attempts the SDK logged as failed (with a traceback) because of a fault, by exception."""

    @property
    def green(self) -> bool:
        return not any(self.problems.values())


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def table(result: SoakResult) -> str:
    statuses = Counter(s.outcome.get("status", "none") for s in result.scenarios)
    kinds = Counter(s.kind for s in result.scenarios)
    lines = [
        "| measure | value |",
        "|---|---|",
        f"| duration | {result.minutes:.1f} min (seed {result.seed}) |",
        f"| runs | {len(result.scenarios)}: {statuses['completed']} completed, {statuses['cancelled']} cancelled "
        f"as the driver asked, {len(result.scenarios) - statuses['completed'] - statuses['cancelled']} other |",
        "| run mix | " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) + " |",
        f"| faults injected | {len(result.faults)} |",
    ]
    for kind in FAULT_KINDS:
        faults = [f for f in result.faults if f.kind == kind]
        times = [f.recovered for f in faults if f.recovered is not None]
        recovery = (
            f"recovery p50 {statistics.median(times):.1f} s, p99 {_percentile(times, 0.99):.1f} s"
            if times
            else "no recovery measured"
        )
        lines.append(f"| {kind} | {len(faults)} · {recovery} |")
    lines += [
        f"| SSE consumers | {result.consumers}, {result.reconnects} reconnects |",
        f"| histories replayed | {result.histories} |",
        "| activity attempts failed by a fault (SDK warnings, retried) | "
        + (", ".join(f"{k.rsplit('.', 1)[-1]} {n}" for k, n in sorted(result.attempt_failures.items())) or "none")
        + " |",
    ]
    for check, problems in result.problems.items():
        lines.append(f"| check `{check}` | {'holds' if not problems else f'**{len(problems)} problem(s)**'} |")
    lost = sum(len(p) for p in result.problems.values())
    lines.append(f"| lost or duplicated | {'nothing' if lost == 0 else f'**{lost} problem(s)**'} |")
    return "\n".join(lines)
