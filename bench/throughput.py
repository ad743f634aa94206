"""Throughput: C concurrent hartflow runs (5 turns each) on one ``hartflow worker`` process and the dev server.

Reports runs/minute (all runs started at once, until the last completes), p50/p99 turn latency (from each run's
history: one turn = one ``model.invoke`` scheduled → the next one scheduled) and the worker's peak RSS
(``VmHWM`` of the worker process, read from ``/proc`` when the burst is over), and how many workflow tasks timed
out (a worker that takes on more work than its CPU gets through in the 10 s workflow-task timeout thrashes).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType

from bench import hartflow_side
from bench.common import ACTIVITY_SCHEDULED, BenchContext, percentile, round_ms, unique
from bench.workload import FINAL_ANSWER, PROMPT, responses, write_script
from tests.support.history import chain_histories
from vocabulary.contracts import MODEL_INVOKE
from workers.worker import connect

TURNS = 5
WORKFLOW_TASK_TIMED_OUT = EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no VmHWM for process {pid}")


def turn_latencies(histories: list[list[Any]]) -> list[float]:
    """Seconds between consecutive ``model.invoke`` schedulings over a run's histories."""
    times = [
        event.event_time.ToDatetime()
        for history in histories
        for event in history
        if event.event_type == ACTIVITY_SCHEDULED
        and event.activity_task_scheduled_event_attributes.activity_type.name == MODEL_INVOKE
    ]
    return [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(times)]


async def measure(ctx: BenchContext, concurrency: int) -> dict[str, Any]:
    task_queue = unique("bench-throughput")
    home = ctx.workdir / unique("home")
    config = hartflow_side.bench_config(
        home, ctx.address, task_queue, turns=TURNS, sticky_queue_timeout_seconds=ctx.sticky_queue_timeout_seconds
    )
    model = write_script(ctx.workdir, responses(TURNS), f"throughput-{TURNS}")
    client = await connect(config)
    with hartflow_side.worker_processes(config, ctx.workdir / f"{task_queue}.yaml") as [worker]:
        began = time.perf_counter()
        handles = await asyncio.gather(
            *(hartflow_side.start_run(client, config, unique("tp"), model, PROMPT) for _ in range(concurrency))
        )
        views = await asyncio.gather(*(handle.result() for handle in handles))
        elapsed = time.perf_counter() - began
        rss = peak_rss_mib(worker.pid)
    failed = [view for view in views if view.status != "completed" or view.final_message != FINAL_ANSWER]
    if failed:
        raise RuntimeError(f"{len(failed)} of {concurrency} throughput runs did not complete: {failed[0]}")
    latencies: list[float] = []
    timeouts = 0
    for handle in handles:
        histories = await chain_histories(client, handle.id, handle.result_run_id or "")
        latencies += turn_latencies(histories)
        timeouts += sum(event.event_type == WORKFLOW_TASK_TIMED_OUT for events in histories for event in events)
    return {
        "concurrency": concurrency,
        "sticky_queue_timeout_seconds": config.temporal.sticky_queue_timeout_seconds,
        "turns_per_run": TURNS,
        "runs_per_minute": round(concurrency / elapsed * 60, 1),
        "turn_p50_ms": round_ms(percentile(latencies, 50)),
        "turn_p99_ms": round_ms(percentile(latencies, 99)),
        "worker_peak_rss_mib": rss,
        "workflow_task_timeouts": timeouts,
        "wall_seconds": round(elapsed, 2),
    }


async def run(ctx: BenchContext, concurrencies: list[int]) -> dict[str, Any]:
    return {"rows": [await measure(ctx, concurrency) for concurrency in concurrencies]}
