"""``python -m bench``: every benchmark family in one run, on a dev server of its own.

    python -m bench                        # the full run (about 15 minutes on 2 cores)
    python -m bench --smoke                # tiny sizes, one repetition: the CI smoke (under a minute)
    python -m bench --only per_turn,history --out bench/results/latest.json --update-readme
    python -m bench --resume-from bench/results/latest.json --only throughput,resume,recovery

Prints a markdown table, writes every number (and the machine it ran on) as JSON, and with ``--update-readme``
rewrites the README's ``<!-- bench:begin -->`` block with the table and the command that produced it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import signal
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import history, per_turn, recovery, report, resume, throughput
from bench.common import FAMILIES, BenchContext
from bench.systems import SYSTEMS
from workers.devserver import DevServer, free_port
from workers.devserver_options import DevServerOptions
from workers.process_exit import hard_exit

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Plan:
    sizes: list[int]
    history_sizes: list[int]
    repetitions: int
    concurrencies: list[int]
    resume_runs: int
    resume_rounds: int
    heartbeat_timeouts: list[int]
    max_run_seconds: float
    warmup_turns: int


FULL = Plan([10, 100, 500], [10, 500], 3, [50, 200], 5, 4, [2, 5, 10], 120, 3)
SMOKE = Plan([3], [3], 1, [3], 1, 2, [1], 60, 1)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and one repetition (CI)")
    parser.add_argument(
        "--only",
        help=f"comma-separated subset of {','.join(FAMILIES)} (with --resume-from: measured again, replacing those)",
    )
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="per_turn: comma-separated subset of systems")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "latest.json")
    parser.add_argument("--update-readme", action="store_true", help="rewrite README.md's bench block")
    parser.add_argument("--repetitions", type=int, help="timed runs per per-turn measurement (default 3; smoke 1)")
    parser.add_argument("--max-run-seconds", type=float, help="cut/skip per-turn runs projected to take longer")
    parser.add_argument(
        "--sticky-queue-timeout",
        type=float,
        help="throughput, recovery: the hartflow workers' temporal.sticky_queue_timeout_seconds (default: its default)",
    )
    parser.add_argument(
        "--worker-tuning",
        type=json.loads,
        default={},
        help="throughput: the hartflow workers' temporal.worker keys as JSON (workers/worker_tuning.py), "
        "e.g. '{\"max_concurrent_workflow_tasks\": 8}'",
    )
    parser.add_argument("--concurrency", help="throughput: comma-separated concurrent runs (default 50,200; smoke 3)")
    parser.add_argument(
        "--worker-processes",
        default="1",
        help="throughput: comma-separated worker process counts, each measured for every concurrency (default 1)",
    )
    parser.add_argument(
        "--resume-from",
        type=Path,
        help="a results JSON of an earlier (interrupted) run: its families are kept and not run again, except "
        "those named in --only",
    )
    args = parser.parse_args(argv)
    unknown = set((args.only or "").split(",")) - {"", *FAMILIES} | set(args.systems.split(",")) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown benchmark or system: {', '.join(sorted(unknown))}")
    return args


async def run(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    plan = SMOKE if args.smoke else FULL
    only = args.only.split(",") if args.only else list(FAMILIES)
    command = shlex.join([".venv/bin/python", "-m", "bench", *argv])
    results: dict[str, Any] = {"commands": [], "smoke": args.smoke, "machine": report.machine(), "wall_seconds": 0}
    if args.resume_from:
        results = json.loads(args.resume_from.read_text(encoding="utf-8"))
        results.setdefault("commands", [results.pop("command", "(unknown)")])
        results["machine"] = report.machine()  # the machine as it is for what this command measures again
        if not args.only:  # finishing an interrupted run: what it measured is kept
            only = [family for family in only if family not in results]
    results["commands"].append(command)
    concurrencies = [int(c) for c in args.concurrency.split(",")] if args.concurrency else plan.concurrencies
    processes = [int(p) for p in args.worker_processes.split(",")]
    began = time.perf_counter() - float(results.get("wall_seconds", 0))
    # A SIGTERM cancels the run, so the dev server and worker processes below are stopped, not leaked.
    main_task = asyncio.current_task()
    assert main_task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    with tempfile.TemporaryDirectory(prefix="hartflow-bench-") as tmp:
        workdir = Path(tmp)
        server = DevServer(DevServerOptions(db_file=workdir / "temporal.db", port=free_port(), ui=False))
        await asyncio.to_thread(server.start)
        try:
            ctx = BenchContext(
                address=server.address,
                workdir=workdir,
                smoke=args.smoke,
                repetitions=args.repetitions or plan.repetitions,
                max_run_seconds=args.max_run_seconds or plan.max_run_seconds,
                warmup_turns=plan.warmup_turns,
                sticky_queue_timeout_seconds=args.sticky_queue_timeout,
                worker_tuning=args.worker_tuning,
                server_pid=server.pid,
            )
            histories: dict[tuple[str, int], dict[str, Any]] = {}
            families: dict[str, Callable[[], Awaitable[dict[str, Any]]]] = {
                "per_turn": lambda: per_turn.run(ctx, plan.sizes, args.systems.split(","), histories),
                "history": lambda: history.run(ctx, plan.history_sizes, histories),
                "throughput": lambda: throughput.run(ctx, concurrencies, processes),
                "resume": lambda: resume.run(ctx, plan.resume_runs, plan.resume_rounds),
                "recovery": lambda: recovery.run(ctx, plan.heartbeat_timeouts),
            }
            for family in FAMILIES:  # in this order: history reuses what per_turn measured
                if family in only:
                    print(f"bench: {family} …", file=sys.stderr, flush=True)
                    started, cpu_before = time.perf_counter(), report.cpu_times()
                    results[family] = await families[family]()
                    results[family]["seconds"] = round(time.perf_counter() - started, 1)
                    results[family]["cpu_steal_percent"] = report.steal_percent(cpu_before, report.cpu_times())
                    results["wall_seconds"] = round(time.perf_counter() - began, 1)
                    write_json(args.out, results)  # so far: a later family that crashes loses nothing
        finally:
            server.stop()
    results["wall_seconds"] = round(time.perf_counter() - began, 1)
    return results


def write_json(path: Path, results: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    # The peers' libraries warn about their own future defaults on every call; the bench has nothing to act on.
    warnings.filterwarnings("ignore", module=r"temporalio\.deepagents|langchain.*|langgraph.*")
    results = asyncio.run(run(args, argv))
    table = report.markdown(results)
    write_json(args.out, results)
    print(table)
    if args.update_readme:
        report.update_readme(REPO / "README.md", table)
    return 0


if __name__ == "__main__":
    # Skip interpreter finalisation, which can crash after a Worker ran (sdk-python#300), as the CLI does.
    sys.stdout.flush()
    hard_exit(main())
