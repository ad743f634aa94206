"""Per-turn overhead: N-turn runs (one tool call per turn), every system side by side, ms/turn and ratio to floor.

Each N in turn, every system at it: one session per system, all open at once, each with a short warm-up run (not
counted), then ``repetitions`` timed runs (at least nine for N ≤ 10) taken in turn, one of each system per round,
so that a machine whose speed drifts moves every system alike; the reported value is the median run's wall time
(client side, start to result) divided by N. A system whose cost per turn grows with N (a checkpoint or a history
that carries the whole conversation) is projected from its last two sizes: a measurement gets as many repetitions
as fit in ``max_run_seconds`` (at least one), and is skipped (with the projection recorded) when a single run
would exceed it.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from bench.common import BenchContext, median, round_ms
from bench.systems import SYSTEMS, TEMPORAL_SYSTEMS, RunResult, hartflow_chain_length, open_session

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
    for n in sizes:
        repetitions = short_run_repetitions if short_run_repetitions and n <= SHORT_RUN_TURNS else ctx.repetitions
        for row in await _measure_at(ctx, n, systems, previous, repetitions, histories):
            rows.append(row)
            if "ms_per_turn" in row:
                previous[row["system"]].append((n, row["ms_per_turn"] / 1000))
    floor = {row["n"]: row["ms_per_turn"] for row in rows if row["system"] == "floor" and "ms_per_turn" in row}
    for row in rows:
        if "ms_per_turn" in row and row["n"] in floor:
            row["ratio_to_floor"] = round(row["ms_per_turn"] / floor[row["n"]], 2)
    return {
        "sizes": sizes,
        "systems": systems,
        "repetitions": ctx.repetitions,
        "short_run_repetitions": short_run_repetitions,
        "interleaved": True,
        "langchain_noop_middlewares": hartflow_chain_length(),
        "rows": rows,
    }


async def _measure_at(
    ctx: BenchContext,
    n: int,
    systems: list[str],
    previous: dict[str, list[tuple[int, float]]],
    repetitions: int,
    histories: dict[tuple[str, int], dict[str, Any]],
) -> list[dict[str, Any]]:
    """Every system at ``n``: one session each, all open at once, their timed runs taken in turn (one of each
    system, then the next round). A shared machine's speed drifts by tens of percent within minutes; runs taken
    one system after another would put that drift into the ratios, taken in turn it moves every system alike."""
    rows = {system: {"system": system, "n": n} for system in systems}
    planned: dict[str, int] = {}
    for system in systems:
        projected = projected_run_seconds(previous[system], n)
        if projected is not None and projected > ctx.max_run_seconds:
            rows[system]["skipped"] = f"projected {projected:.0f} s per run > {ctx.max_run_seconds:.0f} s"
            print(f"bench:   {system} N={n}: {rows[system]['skipped']}", file=sys.stderr, flush=True)
            continue
        # As many repetitions as fit in the budget, at least one: trim repetitions, never N.
        fitting = repetitions if projected is None else int(ctx.max_run_seconds // max(projected, 1e-9))
        planned[system] = max(1, min(repetitions, fitting))
    results: dict[str, list[RunResult]] = {system: [] for system in planned}
    async with contextlib.AsyncExitStack() as stack:
        sessions = {}
        for system, count in planned.items():
            plan = [ctx.warmup_turns] + [n] * count
            sessions[system] = await stack.enter_async_context(open_session(system, ctx, plan))
            await sessions[system].run(ctx.warmup_turns)
        for round_index in range(max(planned.values(), default=0)):
            for system, count in planned.items():
                taken = results[system]
                if round_index < count and not any(result.failure for result in taken):
                    taken.append(await sessions[system].run(n))
    for system, taken in results.items():
        rows[system].update(_summary(system, n, taken, histories))
    return list(rows.values())


def _summary(
    system: str, n: int, results: list[RunResult], histories: dict[tuple[str, int], dict[str, Any]]
) -> dict[str, Any]:
    """One system's timed runs at ``n``: ms/turn of the median run, or why it failed."""
    failed = next((result for result in results if result.failure), None)
    if failed is not None:
        if failed.history is not None and system in TEMPORAL_SYSTEMS:
            histories[(system, n)] = {**failed.history, "failure": failed.failure}
        print(f"bench:   {system} N={n}: failed: {failed.failure}", file=sys.stderr, flush=True)
        return {"failed": failed.failure}
    seconds = median([result.seconds for result in results])
    if system in TEMPORAL_SYSTEMS:
        # The history of the median run (histories of one system and N are all alike).
        histories[(system, n)] = min(results, key=lambda r: abs(r.seconds - seconds)).history or {}
    row = {"ms_per_turn": round_ms(seconds / n), "runs_ms": [round_ms(r.seconds) for r in results]}
    print(f"bench:   {system} N={n}: {row['ms_per_turn']} ms/turn", file=sys.stderr, flush=True)
    return row


__all__ = ["SYSTEMS", "run"]
