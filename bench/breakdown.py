"""``python -m bench.breakdown``: where one hartflow turn's time goes, read from the run's own history.

Runs one N-turn hartflow run (the bench workload: N ``ls`` calls, then an answer) with an in-process worker on a
fresh dev server (the tuned one every hartflow server uses), then splits the run's wall time by its history's
event timestamps:

* **workflow task queue wait**: a workflow task scheduled → started (the server dispatching it to the worker);
* **workflow task processing**: started → completed, i.e. the worker replaying/advancing the workflow — the
  middleware hooks, payload conversion of every input and result, and the SDK's own work;
* per activity type, **schedule-to-start** (scheduled → started) and **run time** (started → completed): the
  model call, the tool, and the storage round trips (``thread.load``, ``transcript.*``, ``thread.commit``, …).

What is not inside any of these is the server's own bookkeeping between them (``other``). Times are the sum
over the run divided by N, in ms; the table also gives each activity's count per turn. Below the table, the CPU
time the run cost per turn, in this process (worker and client) and in the dev server's processes: on a shared
machine wall times move with the neighbours' load, CPU times much less.

    python -m bench.breakdown --turns 100
    python -m bench.breakdown --turns 200 --profile /tmp/worker.prof   # cProfile of the worker's event loop

``--profile`` writes a cProfile of the whole process while the run goes (the worker runs in-process), for
``python -m pstats`` or snakeviz: the Python CPU a turn costs.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType

from bench import hartflow_side
from bench.common import group_cpu_seconds, unique
from bench.workload import FINAL_ANSWER, PROMPT, responses, write_script
from workers.devserver import DevServer, free_port
from workers.devserver_options import DevServerOptions
from workers.testing.history import chain_histories
from workers.worker import connect

_E = EventType


def breakdown(histories: list[list[Any]]) -> dict[str, Any]:
    """Seconds per category over the run's histories (continue-as-new runs included)."""
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    scheduled: dict[int, Any] = {}
    started: dict[int, Any] = {}
    activity_type: dict[int, str] = {}
    first = last = None
    last_task: float | None = None
    for history in histories:
        for event in history:
            when = event.event_time.ToDatetime()
            first = first or when
            last = when
            kind = event.event_type
            if kind in (_E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, _E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED):
                scheduled[event.event_id] = when
                if kind == _E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                    name = event.activity_task_scheduled_event_attributes.activity_type.name
                    activity_type[event.event_id] = name
                    counts[name] += 1
            elif kind == _E.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                origin = event.workflow_task_started_event_attributes.scheduled_event_id
                totals["workflow task queue wait"] += (when - scheduled[origin]).total_seconds()
                started[event.event_id] = when
            elif kind == _E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                origin = event.workflow_task_completed_event_attributes.started_event_id
                last_task = (when - started[origin]).total_seconds()
                totals["workflow task processing"] += last_task
                counts["workflow task"] += 1
            elif kind == _E.EVENT_TYPE_MARKER_RECORDED and last_task is not None:
                # A local activity (the circuit-breaker check) ran inside the workflow task just completed: its
                # time is part of that task's processing, shown separately as well.
                totals["  of which tasks running a local activity"] += last_task
                counts["  of which tasks running a local activity"] += 1
                last_task = None
            elif kind == _E.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                origin = event.activity_task_started_event_attributes.scheduled_event_id
                totals[f"{activity_type[origin]}: schedule-to-start"] += (when - scheduled[origin]).total_seconds()
                started[event.event_id] = when
            elif kind in (_E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, _E.EVENT_TYPE_ACTIVITY_TASK_FAILED):
                attributes = (
                    event.activity_task_completed_event_attributes
                    if kind == _E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
                    else event.activity_task_failed_event_attributes
                )
                name = activity_type[attributes.scheduled_event_id]
                totals[f"{name}: run"] += (when - started[attributes.started_event_id]).total_seconds()
    wall = (last - first).total_seconds() if first and last else 0.0
    return {"wall": wall, "totals": dict(totals), "counts": dict(counts)}


async def measure(turns: int, profile: Path | None, stream_tokens: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hartflow-breakdown-") as tmp:
        workdir = Path(tmp)
        server = DevServer(DevServerOptions(db_file=workdir / "temporal.db", port=free_port(), ui=False))
        await asyncio.to_thread(server.start)
        try:
            config = hartflow_side.bench_config(
                workdir / "home", server.address, unique("breakdown"), turns=turns, stream_tokens=stream_tokens
            )
            model = write_script(workdir, responses(turns), f"turns-{turns}")
            client = await connect(config)
            async with hartflow_side.in_process_worker(client, config):
                warmup = await hartflow_side.start_run(client, config, unique("warm"), model, PROMPT)
                await warmup.result()
                profiler = cProfile.Profile() if profile else None
                began, cpu, server_cpu = time.perf_counter(), time.process_time(), group_cpu_seconds(server.pid)
                if profiler:
                    profiler.enable()
                handle = await hartflow_side.start_run(client, config, unique("breakdown"), model, PROMPT)
                view = await handle.result()
                if profiler:
                    profiler.disable()
                    profiler.dump_stats(str(profile))
                elapsed = time.perf_counter() - began
                cpu, server_cpu = time.process_time() - cpu, group_cpu_seconds(server.pid) - server_cpu
            if view.final_message != FINAL_ANSWER:
                raise RuntimeError(f"the run ended {view.status}: {view.final_message}")
            result = breakdown(await chain_histories(client, handle.id, handle.result_run_id or ""))
            result.update(client_wall=elapsed, cpu=cpu, server_cpu=server_cpu)
            return result
        finally:
            await asyncio.to_thread(server.stop)


def table(result: dict[str, Any], turns: int) -> str:
    per_turn = {name: seconds * 1000 / turns for name, seconds in result["totals"].items()}
    accounted = sum(ms for name, ms in per_turn.items() if not name.startswith("  "))
    wall = result["wall"] * 1000 / turns
    lines = [
        f"One hartflow run of {turns} turns: {result['client_wall'] * 1000 / turns:.1f} ms/turn start to result "
        f"({wall:.1f} ms/turn between its first and last history event).",
        "",
        "| where | ms/turn | share | count/turn |",
        "|---|---:|---:|---:|",
    ]
    top = sorted(((name, ms) for name, ms in per_turn.items() if not name.startswith("  ")), key=lambda i: -i[1])
    for name, ms in top:
        activity = name.split(": ")[0]
        count = result["counts"].get(activity if ": " in name else "workflow task", 0) / turns
        lines.append(f"| {name} | {ms:.2f} | {ms / wall:.0%} | {count:.2f} |")
        if name == "workflow task processing":
            for sub, sub_ms in per_turn.items():
                if sub.startswith("  "):
                    sub_count = result["counts"].get(sub, 0) / turns
                    lines.append(f"| {sub} | {sub_ms:.2f} | {sub_ms / wall:.0%} | {sub_count:.2f} |")
    rest = wall - accounted
    lines.append(f"| other (server bookkeeping, overlap) | {rest:.2f} | {rest / wall:.0%} | |")
    lines.append("")
    lines.append(
        f"CPU per turn: {result['cpu'] * 1000 / turns:.1f} ms in this process (worker and client), "
        f"{result['server_cpu'] * 1000 / turns:.1f} ms in the dev server."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.breakdown", description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--profile", type=Path, help="write a cProfile of the timed run here")
    parser.add_argument("--stream-tokens", action="store_true", help="model calls publish live tokens")
    args = parser.parse_args()
    if args.turns < 1:
        parser.error("--turns must be >= 1")
    print(table(asyncio.run(measure(args.turns, args.profile, args.stream_tokens)), args.turns))


if __name__ == "__main__":
    main()
