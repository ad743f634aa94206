"""``python -m bench.breakdown``: where one hartflow turn's time goes, beside the Temporal floor's, read from each
run's own history.

Runs one N-turn hartflow run (the bench workload: N ``ls`` calls, then an answer) with an in-process worker on a
fresh dev server (the tuned one every hartflow server uses), and one N-turn run of the floor (``bench/floor.py``:
one model and one tool activity a turn) with its worker on the same server; then splits each run's wall time by
its history's event timestamps:

* **workflow task queue wait**: a workflow task scheduled → started (the server dispatching it to the worker);
* **workflow task processing**: started → completed, i.e. the worker replaying/advancing the workflow — the
  middleware hooks, payload conversion of every input and result, and the SDK's own work;
* per activity type, **schedule-to-start** (scheduled → started) and **run time** (started → completed): the
  model call, the tool, and the storage round trips (``thread.load``, ``transcript.*``, ``thread.commit``, …).

What is not inside any of these is the server's own bookkeeping between them (``other``). Times are the sum
over the run divided by N, in ms; the table also gives each activity's count per turn. Below the table, each
run's history events per turn by kind and the CPU time it cost per turn, in this process (worker and client) and
in the dev server's processes: on a shared machine wall times move with the neighbours' load, CPU times much less.
``--system hartflow`` measures hartflow alone; ``--storage s3`` puts hartflow's storage on S3 (a SeaweedFS
server started for the run, ``workers/testing/s3.py``) instead of the local filesystem; ``--model-delay S``
makes hartflow's scripted model take S seconds an answer, as a provider would (the storage writes of a turn go
beside the call).

    python -m bench.breakdown --turns 100
    python -m bench.breakdown --turns 200 --profile /tmp/worker.prof   # cProfile of the worker's event loop

``--profile`` writes a cProfile of the whole process while the hartflow run goes (the worker runs in-process),
for ``python -m pstats`` or snakeviz: the Python CPU a turn costs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from bench import hartflow_side
from bench.common import group_cpu_seconds, unique
from bench.floor import MODEL_ACTIVITY as FLOOR_MODEL
from bench.floor import TOOL_ACTIVITY as FLOOR_TOOL
from bench.floor import FloorInput, FloorWorkflow, floor_worker
from bench.workload import FINAL_ANSWER, PROMPT, responses, write_script
from vocabulary.contracts import MODEL_INVOKE, TOOL_EXECUTE
from workers.devserver import DevServer, free_port
from workers.devserver_options import DevServerOptions
from workers.testing.history import chain_histories
from workers.testing.s3 import S3Server, s3_storage_settings
from workers.worker import connect

_E = EventType


def breakdown(histories: list[list[Any]], rename: dict[str, str] | None = None) -> dict[str, Any]:
    """Seconds per category over the run's histories (continue-as-new runs included); ``rename`` shows activity
    types under other names. Also counts the events by kind."""
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    events: dict[str, int] = defaultdict(int)
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
            events[_kind_name(kind)] += 1
            if kind in (_E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, _E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED):
                scheduled[event.event_id] = when
                if kind == _E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                    name = event.activity_task_scheduled_event_attributes.activity_type.name
                    name = (rename or {}).get(name, name)
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
    return {"wall": wall, "totals": dict(totals), "counts": dict(counts), "events": dict(events)}


def _kind_name(kind: int) -> str:
    """``EVENT_TYPE_ACTIVITY_TASK_SCHEDULED`` → ``activity task scheduled``."""
    return EventType.Name(kind).removeprefix("EVENT_TYPE_").lower().replace("_", " ")


SYSTEMS = ("hartflow", "floor")
_FLOOR_ROWS = {FLOOR_MODEL: MODEL_INVOKE.name, FLOOR_TOOL: TOOL_EXECUTE.name}
"""The floor's activities share the rows of hartflow's model and tool activities."""


async def measure(
    turns: int,
    profile: Path | None,
    stream_tokens: bool = False,
    systems: tuple[str, ...] = SYSTEMS,
    storage: str = "filesystem",
    model_delay: float = 0.0,
) -> dict[str, dict[str, Any]]:
    """One measured run of each system in ``systems`` (after an unmeasured warm-up run), on one fresh server."""
    with tempfile.TemporaryDirectory(prefix="hartflow-breakdown-") as tmp, contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        server = DevServer(DevServerOptions(db_file=workdir / "temporal.db", port=free_port(), ui=False))
        await asyncio.to_thread(server.start)
        stack.callback(server.stop)
        storage_config: dict[str, Any] = {"home": str(workdir / "home")}
        if storage == "s3":
            s3 = S3Server(workdir / "s3")
            await asyncio.to_thread(s3.start)
            stack.callback(s3.stop)
            storage_config.update(s3_storage_settings(s3, s3.create_bucket("breakdown")))
        results = {}
        if "hartflow" in systems:
            results["hartflow"] = await _hartflow(
                server, workdir, turns, profile, stream_tokens, storage_config, model_delay
            )
        if "floor" in systems:
            results["floor"] = await _floor(server, workdir, turns)
        return results


async def _hartflow(
    server: DevServer,
    workdir: Path,
    turns: int,
    profile: Path | None,
    stream_tokens: bool,
    storage: dict[str, Any],
    model_delay: float,
) -> dict[str, Any]:
    config = hartflow_side.bench_config(
        workdir / "home", server.address, unique("breakdown"), turns=turns, stream_tokens=stream_tokens, storage=storage
    )
    model = write_script(workdir, [{**entry, "delay": model_delay} for entry in responses(turns)], f"turns-{turns}")
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


async def _floor(server: DevServer, workdir: Path, turns: int) -> dict[str, Any]:
    client = await Client.connect(server.address, data_converter=pydantic_data_converter)
    workspace = workdir / "floor-workspace"
    workspace.mkdir()
    task_queue = unique("floor-breakdown")
    async with floor_worker(client, task_queue, str(workspace)):
        await client.execute_workflow(
            FloorWorkflow.run, FloorInput(turns, "warm"), id=unique("floor-warm"), task_queue=task_queue
        )
        began, cpu, server_cpu = time.perf_counter(), time.process_time(), group_cpu_seconds(server.pid)
        handle = await client.start_workflow(
            FloorWorkflow.run, FloorInput(turns, "timed"), id=unique("floor-breakdown"), task_queue=task_queue
        )
        answer = await handle.result()
        elapsed = time.perf_counter() - began
        cpu, server_cpu = time.process_time() - cpu, group_cpu_seconds(server.pid) - server_cpu
    if answer != FINAL_ANSWER:
        raise RuntimeError(f"the floor answered {answer!r}")
    history = await handle.fetch_history()
    result = breakdown([list(history.events)], rename=_FLOOR_ROWS)
    result.update(client_wall=elapsed, cpu=cpu, server_cpu=server_cpu)
    return result


def table(results: dict[str, dict[str, Any]], turns: int) -> str:
    """The systems' categories side by side (ms/turn and count/turn each), then each one's events and CPU."""
    names = list(results)
    per_turn = {
        system: {name: seconds * 1000 / turns for name, seconds in result["totals"].items()}
        for system, result in results.items()
    }
    walls = {system: result["wall"] * 1000 / turns for system, result in results.items()}
    for system, rows in per_turn.items():
        accounted = sum(ms for name, ms in rows.items() if not name.startswith("  "))
        rows["other (server bookkeeping, overlap)"] = walls[system] - accounted
    first = per_turn[names[0]]
    order = sorted((name for name in first if not name.startswith("  ")), key=lambda name: -first[name])
    order += [name for rows in per_turn.values() for name in rows if name not in order and not name.startswith("  ")]
    order.remove("other (server bookkeeping, overlap)")
    order.append("other (server bookkeeping, overlap)")
    subs = [name for name in first if name.startswith("  ")]
    lines = [
        f"One run of {turns} turns per system: "
        + "; ".join(
            f"{system} {results[system]['client_wall'] * 1000 / turns:.1f} ms/turn start to result "
            f"({walls[system]:.1f} between its first and last history event)"
            for system in names
        )
        + ".",
        "",
        "| where | " + " | ".join(f"{system} ms/turn | count/turn" for system in names) + " |",
        "|---|" + "---:|---:|" * len(names),
    ]

    def row(name: str) -> str:
        cells = []
        for system in names:
            ms = per_turn[system].get(name)
            counts = results[system]["counts"]
            count = counts.get(name.split(": ")[0] if ": " in name else "workflow task", 0) / turns
            if name.startswith("  "):
                count = counts.get(name, 0) / turns
            shown_count = "" if name.startswith("other") or ms is None else f"{count:.2f}"
            cells.append(("–" if ms is None else f"{ms:.2f}") + f" | {shown_count}")
        return f"| {name} | " + " | ".join(cells) + " |"

    for name in order:
        lines.append(row(name))
        if name == "workflow task processing":
            lines.extend(row(sub) for sub in subs)
    lines.append("")
    for system in names:
        result = results[system]
        events = result["events"]
        total = sum(events.values()) / turns
        kinds = ", ".join(f"{kind} {count / turns:.2f}" for kind, count in sorted(events.items(), key=lambda i: -i[1]))
        lines.append(
            f"{system}: {total:.2f} history events per turn ({kinds}); CPU per turn "
            f"{result['cpu'] * 1000 / turns:.1f} ms in this process (worker and client), "
            f"{result['server_cpu'] * 1000 / turns:.1f} ms in the dev server."
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.breakdown", description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--profile", type=Path, help="write a cProfile of the timed hartflow run here")
    parser.add_argument("--stream-tokens", action="store_true", help="hartflow's model calls publish live tokens")
    parser.add_argument("--system", choices=SYSTEMS, help="measure this system only (default: both)")
    parser.add_argument("--storage", choices=("filesystem", "s3"), default="filesystem", help="hartflow's storage")
    parser.add_argument("--model-delay", type=float, default=0.0, help="seconds hartflow's model takes an answer")
    args = parser.parse_args()
    if args.turns < 1:
        parser.error("--turns must be >= 1")
    systems = (args.system,) if args.system else SYSTEMS
    if args.model_delay < 0:
        parser.error("--model-delay must be >= 0")
    results = asyncio.run(
        measure(args.turns, args.profile, args.stream_tokens, systems, args.storage, args.model_delay)
    )
    print(table(results, args.turns))


if __name__ == "__main__":
    main()
