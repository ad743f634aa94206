"""Throughput: C concurrent runs (5 turns each) on P worker processes (default one) and the dev server, hartflow
and the floor.

Reports runs/minute (all runs started at once, until the last completes), p50/p99 turn latency (from each run's
history: one turn = one ``model.invoke`` scheduled → the next one scheduled) and the worker's peak RSS
(``VmHWM`` of the worker process, read from ``/proc`` when the burst is over), and how many workflow tasks timed
out (a worker that takes on more work than its CPU gets through in the 10 s workflow-task timeout thrashes).
The Temporal floor (``bench/floor.py``: one model and one tool activity per turn, nothing else) runs the same
burst in as many worker processes of its own, so the ratio says what hartflow's middleware, state and storage
cost under load. ``--worker-processes`` says how many processes a machine should run: on 2 cores the SDK's
Python is the limit of one process (``python -m bench.cpu_profile``), so a second one can use the other core.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from bench import hartflow_side
from bench.common import ACTIVITY_SCHEDULED, BenchContext, group_cpu_seconds, percentile, round_ms, unique
from bench.floor import MODEL_ACTIVITY, FloorInput, FloorWorkflow
from bench.workload import FINAL_ANSWER, PROMPT, responses, write_script
from vocabulary.contracts import MODEL_INVOKE
from workers.testing.history import chain_histories
from workers.worker import connect

TURNS = 5
WORKFLOW_TASK_TIMED_OUT = EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no VmHWM for process {pid}")


def turn_latencies(histories: list[list[Any]], model_activity: str = MODEL_INVOKE) -> list[float]:
    """Seconds between consecutive model-activity schedulings over a run's histories."""
    times = [
        event.event_time.ToDatetime()
        for history in histories
        for event in history
        if event.event_type == ACTIVITY_SCHEDULED
        and event.activity_task_scheduled_event_attributes.activity_type.name == model_activity
    ]
    return [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(times)]


async def measure(ctx: BenchContext, concurrency: int, processes: int = 1) -> dict[str, Any]:
    task_queue = unique("bench-throughput")
    home = ctx.workdir / unique("home")
    config = hartflow_side.bench_config(
        home,
        ctx.address,
        task_queue,
        turns=TURNS,
        sticky_queue_timeout_seconds=ctx.sticky_queue_timeout_seconds,
        worker_tuning=ctx.worker_tuning,
    )
    model = write_script(ctx.workdir, responses(TURNS), f"throughput-{TURNS}")
    client = await connect(config)
    with hartflow_side.worker_processes(config, ctx.workdir / f"{task_queue}.yaml", processes) as workers:
        cpu = _cpu_seconds(ctx, [worker.pid for worker in workers])
        began = time.perf_counter()
        handles = await asyncio.gather(
            *(hartflow_side.start_run(client, config, unique("tp"), model, PROMPT) for _ in range(concurrency))
        )
        views = await asyncio.gather(*(handle.result() for handle in handles))
        elapsed = time.perf_counter() - began
        cpu = [after - before for before, after in zip(cpu, _cpu_seconds(ctx, [w.pid for w in workers]), strict=True)]
        rss = max(peak_rss_mib(worker.pid) for worker in workers)
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
        "worker_processes": processes,
        "sticky_queue_timeout_seconds": config.temporal.sticky_queue_timeout_seconds,
        "worker_tuning": config.temporal.worker.model_dump(exclude_none=True),
        "turns_per_run": TURNS,
        "runs_per_minute": round(concurrency / elapsed * 60, 1),
        "turn_p50_ms": round_ms(percentile(latencies, 50)),
        "turn_p99_ms": round_ms(percentile(latencies, 99)),
        "worker_peak_rss_mib": rss,
        "workflow_task_timeouts": timeouts,
        "wall_seconds": round(elapsed, 2),
        **_cpu_per_run(cpu, concurrency),
    }


async def measure_floor(ctx: BenchContext, concurrency: int, processes: int = 1) -> dict[str, Any]:
    task_queue = unique("bench-throughput-floor")
    workspace = ctx.workdir / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    client = await Client.connect(ctx.address, data_converter=pydantic_data_converter)
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.floor", ctx.address, task_queue, str(workspace)],
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,  # it leads its process group, whose CPU time is read
        )
        for _ in range(processes)
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None
            if "worker polling task queue" not in worker.stdout.readline():
                raise RuntimeError(f"the floor worker exited with {worker.wait()}")
            threading.Thread(target=worker.stdout.read, daemon=True).start()
        cpu = _cpu_seconds(ctx, [worker.pid for worker in workers])
        began = time.perf_counter()
        handles = await asyncio.gather(
            *(
                client.start_workflow(
                    FloorWorkflow.run, FloorInput(TURNS, unique("run")), id=unique("tp-floor"), task_queue=task_queue
                )
                for _ in range(concurrency)
            )
        )
        await asyncio.gather(*(handle.result() for handle in handles))
        elapsed = time.perf_counter() - began
        cpu = [after - before for before, after in zip(cpu, _cpu_seconds(ctx, [w.pid for w in workers]), strict=True)]
        rss = max(peak_rss_mib(worker.pid) for worker in workers)
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(30)
    latencies: list[float] = []
    for handle in handles:
        histories = await chain_histories(client, handle.id, handle.result_run_id or "")
        latencies += turn_latencies(histories, MODEL_ACTIVITY)
    return {
        "concurrency": concurrency,
        "worker_processes": processes,
        "turns_per_run": TURNS,
        "runs_per_minute": round(concurrency / elapsed * 60, 1),
        "turn_p50_ms": round_ms(percentile(latencies, 50)),
        "turn_p99_ms": round_ms(percentile(latencies, 99)),
        "worker_peak_rss_mib": rss,
        "wall_seconds": round(elapsed, 2),
        **_cpu_per_run(cpu, concurrency),
    }


def _cpu_seconds(ctx: BenchContext, workers: list[int]) -> list[float]:
    """CPU seconds so far of the dev server, then of the worker processes (each leads its process group)."""
    return [group_cpu_seconds(ctx.server_pid), sum(group_cpu_seconds(pid) for pid in workers)]


def _cpu_per_run(used: list[float], runs: int) -> dict[str, float]:
    """What one run cost the server and the workers in CPU ms: the steadier figure on a shared machine."""
    return {"server_cpu_ms_per_run": round_ms(used[0] / runs), "worker_cpu_ms_per_run": round_ms(used[1] / runs)}


async def run(ctx: BenchContext, concurrencies: list[int], processes: list[int] | None = None) -> dict[str, Any]:
    rows = []
    for concurrency, count in itertools.product(concurrencies, processes or [1]):
        row = await measure(ctx, concurrency, count)
        floor = await measure_floor(ctx, concurrency, count)
        row["floor"] = floor
        row["ratio_to_floor"] = round(row["runs_per_minute"] / floor["runs_per_minute"], 2)
        rows.append(row)
    return {"rows": rows}
