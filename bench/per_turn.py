"""Per-turn overhead: N-turn runs (one tool call per turn), every system side by side, ms/turn and ratio to floor.

Each N in turn, every system at it (so a system and the floor are measured minutes apart, not a section apart);
for each: one session, a short warm-up run (not counted), then ``repetitions`` timed runs (at least nine for
N ≤ 10); the reported value is the median run's wall time (client side, start to result)
divided by N. A system whose cost per turn grows with N (a checkpoint or a history that carries the whole
conversation) is projected from its last two sizes: a measurement gets as many repetitions as fit in
``max_run_seconds`` (at least one), and is skipped (with the projection recorded) when a single run would
exceed it.
"""

from __future__ import annotations

import sys
from typing import Any

from bench.common import BenchContext, median, round_ms
from bench.systems import SYSTEMS, TEMPORAL_SYSTEMS, hartflow_chain_length, open_session

SHORT_RUN_TURNS = 10
SHORT_RUN_REPETITIONS = 9
"""A 10-turn run takes about a second, so one scheduling hiccup moves its per-turn figure by tens of percent;
short runs are cheap, so they are repeated more often, and the median of nine holds steady."""


def projected_run_seconds(previous: list[tuple[int, float]], turns: int) -> float | None:
    """One run's projected seconds at ``turns`` from earlier (N, seconds-per-turn) results of the same system:
    per-turn cost extrapolated linearly in N when it grew, held flat otherwise."""
    if not previous:
        return None
    n1, per_turn1 = previous[-1]
    if len(previous) >= 2:
        n0, per_turn0 = previous[-2]
        slope = max(0.0, (per_turn1 - per_turn0) / (n1 - n0))
    else:
        slope = 0.0
    return (per_turn1 + slope * (turns - n1)) * turns


async def run(
    ctx: BenchContext, sizes: list[int], systems: list[str], histories: dict[tuple[str, int], dict[str, Any]]
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    short_run_repetitions = None if ctx.smoke else max(ctx.repetitions, SHORT_RUN_REPETITIONS)
    previous: dict[str, list[tuple[int, float]]] = {system: [] for system in systems}
    # Every system at one N before the next N: the ratios compare runs minutes apart, not a whole section apart,
    # which on a shared machine whose speed drifts is most of what keeps them steady.
    for n in sizes:
        for system in systems:
            row = await _measure(ctx, system, n, previous[system], short_run_repetitions, histories)
            rows.append(row)
            if "ms_per_turn" in row:
                previous[system].append((n, row["ms_per_turn"] / 1000))
    floor = {row["n"]: row["ms_per_turn"] for row in rows if row["system"] == "floor" and "ms_per_turn" in row}
    for row in rows:
        if "ms_per_turn" in row and row["n"] in floor:
            row["ratio_to_floor"] = round(row["ms_per_turn"] / floor[row["n"]], 2)
    return {
        "sizes": sizes,
        "systems": systems,
        "repetitions": ctx.repetitions,
        "short_run_repetitions": short_run_repetitions,
        "langchain_noop_middlewares": hartflow_chain_length(),
        "rows": rows,
    }


async def _measure(
    ctx: BenchContext,
    system: str,
    n: int,
    previous: list[tuple[int, float]],
    short_run_repetitions: int | None,
    histories: dict[tuple[str, int], dict[str, Any]],
) -> dict[str, Any]:
    """One system at one N: its row (ms/turn, or why it was skipped or failed)."""
    projected = projected_run_seconds(previous, n)
    repetitions = short_run_repetitions if short_run_repetitions and n <= SHORT_RUN_TURNS else ctx.repetitions
    row: dict[str, Any] = {"system": system, "n": n}
    if projected is not None:
        # As many repetitions as fit in the budget, at least one: trim repetitions, never N.
        repetitions = max(1, min(repetitions, int(ctx.max_run_seconds // max(projected, 1e-9))))
    if projected is not None and projected > ctx.max_run_seconds:
        row["skipped"] = f"projected {projected:.0f} s per run > {ctx.max_run_seconds:.0f} s"
        print(f"bench:   {system} N={n}: {row['skipped']}", file=sys.stderr, flush=True)
        return row
    async with open_session(system, ctx, [ctx.warmup_turns] + [n] * repetitions) as session:
        await session.run(ctx.warmup_turns)
        results = [await session.run(n) for _ in range(repetitions)]
    failed = next((result for result in results if result.failure), None)
    if failed is not None:
        if failed.history is not None and system in TEMPORAL_SYSTEMS:
            histories[(system, n)] = {**failed.history, "failure": failed.failure}
        print(f"bench:   {system} N={n}: failed: {failed.failure}", file=sys.stderr, flush=True)
        return {**row, "failed": failed.failure}
    seconds = median([result.seconds for result in results])
    row.update(ms_per_turn=round_ms(seconds / n), runs_ms=[round_ms(r.seconds) for r in results])
    if system in TEMPORAL_SYSTEMS:
        # The history of the median run (histories of one system and N are all alike).
        histories[(system, n)] = min(results, key=lambda r: abs(r.seconds - seconds)).history or {}
    print(f"bench:   {system} N={n}: {row['ms_per_turn']} ms/turn", file=sys.stderr, flush=True)
    return row


__all__ = ["SYSTEMS", "run"]
