"""``python -m bench.server_tuning``: what the dev server's settings cost a sequential agent run, per turn.

Runs the Temporal floor (``bench/floor.py``: one model and one tool activity per turn, nothing else) on a fresh
dev server for each setting, so the numbers isolate the server: the transfer-queue poll limit
(``history.transferProcessorMaxPollRPS``) and the persistence (in memory, a SQLite file with the driver's default
pragmas, a SQLite file with WAL and ``synchronous=NORMAL``, the pragmas hartflow uses).

    python -m bench.server_tuning                      # every setting, 60 turns, 3 timed runs each
    python -m bench.server_tuning --turns 20 --repetitions 1 --limits 20,1000 --storage wal

Prints one markdown table (median ms per turn over the timed runs; a warm-up run comes first and is not counted).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from bench.common import median, unique
from bench.floor import FloorInput, FloorWorkflow, floor_worker
from workers.devserver import DevServer, free_port
from workers.devserver_options import DevServerOptions

STORAGES = ("memory", "sqlite-default", "wal")


def _options(storage: str, limit: int, workdir: Path) -> DevServerOptions:
    limits = {"history.transferProcessorMaxPollRPS": limit}
    options = DevServerOptions(port=free_port(), ui=False, dynamic_config=limits)
    if storage != "memory":
        options.db_file = workdir / f"{storage}-{limit}.db"
    if storage == "sqlite-default":
        # DevServer adds the WAL pragmas to every file database; an explicit default undoes them.
        options.extra_args = ["--sqlite-pragma", "journal_mode=delete", "--sqlite-pragma", "synchronous=2"]
    return options


async def _ms_per_turn(address: str, turns: int, repetitions: int, workdir: Path) -> float:
    client = await Client.connect(address, data_converter=pydantic_data_converter)
    queue = unique("tuning")
    workspace = workdir / "workspace"
    workspace.mkdir(exist_ok=True)
    timings: list[float] = []
    async with floor_worker(client, queue, str(workspace)):
        for attempt in range(repetitions + 1):
            began = time.perf_counter()
            await client.execute_workflow(
                FloorWorkflow.run, FloorInput(turns, unique("run")), id=unique("floor"), task_queue=queue
            )
            if attempt:  # the first run warms the worker and the server up
                timings.append((time.perf_counter() - began) * 1000 / turns)
    return median(timings)


async def measure(storages: list[str], limits: list[int], turns: int, repetitions: int) -> dict[tuple[str, int], float]:
    results: dict[tuple[str, int], float] = {}
    with tempfile.TemporaryDirectory(prefix="hartflow-tuning-") as tmp:
        for storage in storages:
            for limit in limits:
                server = DevServer(_options(storage, limit, Path(tmp)))
                await asyncio.to_thread(server.start)
                try:
                    results[storage, limit] = await _ms_per_turn(server.address, turns, repetitions, Path(tmp))
                finally:
                    await asyncio.to_thread(server.stop)
    return results


def table(results: dict[tuple[str, int], float], storages: list[str], limits: list[int]) -> str:
    lines = ["| transferProcessorMaxPollRPS | " + " | ".join(storages) + " |", "|---:|" + "---:|" * len(storages)]
    for limit in limits:
        cells = " | ".join(f"{results[storage, limit]:.1f}" for storage in storages)
        lines.append(f"| {limit}{' (server default)' if limit == 20 else ''} | {cells} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.server_tuning", description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--limits", default="20,100,200,1000,10000", help="comma-separated poll limits")
    parser.add_argument("--storage", default=",".join(STORAGES), help=f"comma-separated subset of {STORAGES}")
    args = parser.parse_args()
    storages = [s for s in args.storage.split(",") if s]
    unknown = set(storages) - set(STORAGES)
    if unknown or args.turns < 1 or args.repetitions < 1:
        parser.error(f"unknown storage {sorted(unknown)}" if unknown else "--turns and --repetitions must be >= 1")
    limits = [int(limit) for limit in args.limits.split(",")]
    results = asyncio.run(measure(storages, limits, args.turns, args.repetitions))
    print(f"Floor ms per turn ({args.turns} turns, median of {args.repetitions} runs):\n")
    print(table(results, storages, limits))


if __name__ == "__main__":
    main()
