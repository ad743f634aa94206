"""``python -m bench.soak --minutes M --runs R --seed S``: the soak; prints its table and every problem found,
exits 1 when any check does not hold."""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

from bench.soak import checks
from bench.soak.chaos import Chaos
from bench.soak.clients import Clients
from bench.soak.deployment import Deployment
from bench.soak.driver import Driver
from bench.soak.report import SoakResult, table
from workers.worker import connect


async def soak(directory: Path, *, minutes: float, runs: int, seed: int, fault_rounds: int = 0) -> SoakResult:
    """Runs are started until ``minutes`` have passed or ``runs`` were started, and in any case until the chaos
    injected ``fault_rounds`` full rounds (every kind of fault once per round)."""
    deployment = await asyncio.to_thread(Deployment(directory).start)
    began = time.monotonic()
    try:
        client = await connect(deployment.config)
        clients = Clients(deployment, client, random.Random(seed))
        driver = Driver(clients, directory / "scripts", seed)
        chaos = Chaos(deployment, seed, streaming=clients.streaming)
        stop = asyncio.Event()
        chaos_task = asyncio.create_task(chaos.run(stop))
        until = began + minutes * 60
        await driver.run(lambda n: (n < runs and time.monotonic() < until) or chaos.rounds < fault_rounds)
        stop.set()
        await chaos_task
        # After the last repair every run must still end by itself: the driver waited for each.
        chaos.measure(driver.settles)
        problems = {
            "finished": await checks.finished(clients, driver.scenarios),
            "state": await checks.state(clients, driver.scenarios),
        }
        problems["replay"], problems["sandbox"], histories = await checks.replay_and_sandboxes(clients)
        problems["streams"], consumers, reconnects = await checks.streams(clients, driver.scenarios)
        problems["clients"] = clients.problems
    finally:
        await asyncio.to_thread(deployment.stop)
    (directory / "cli.log").write_text("\n".join(clients.cli_logs))
    problems["logs"], attempt_failures = checks.logs({**deployment.logs(), "cli.log": "\n".join(clients.cli_logs)})
    return SoakResult((time.monotonic() - began) / 60, seed, driver.scenarios, chaos.faults, problems,
                      consumers, reconnects, histories, attempt_failures)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--fault-rounds",
        type=int,
        default=0,
        help="keep runs going until this many full rounds of faults (every kind once) were injected",
    )
    parser.add_argument("--directory", type=Path, default=None, help="keep the deployment's files here")
    args = parser.parse_args()
    directory = args.directory or Path(tempfile.mkdtemp(prefix="hartflow-soak-"))
    result = asyncio.run(
        soak(directory.resolve(), minutes=args.minutes, runs=args.runs, seed=args.seed, fault_rounds=args.fault_rounds)
    )
    print(table(result))
    for check, problems in result.problems.items():
        for problem in problems:
            print(f"\n[{check}] {problem}", file=sys.stderr)
    print(f"\nfiles: {directory}", file=sys.stderr)
    return 0 if result.green else 1


if __name__ == "__main__":
    sys.exit(main())
