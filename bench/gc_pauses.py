"""``python -m bench.gc_pauses``: the garbage collector's pauses in a worker's process while hartflow runs turns.

Runs ``bench.breakdown``'s hartflow run (an N-turn warm-up run, then the timed N-turn run, with an in-process
worker) and times every collection the interpreter makes meanwhile, by generation. A full (generation 2)
collection walks every tracked object of the process, the modules, classes and functions its imports built
included, and holds the GIL while it does: the worker's event loop and its workflow threads wait. ``--freeze``
first moves what the process holds after its imports into the permanent generation (``gc.freeze()``), as
``hartflow worker`` and ``hartflow dev`` do once their worker is built (``workers/cli/processes.py``).

    python -m bench.gc_pauses --turns 100
    python -m bench.gc_pauses --turns 100 --freeze
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import threading
import time
from collections import defaultdict
from typing import Any

from bench.breakdown import measure


def _timed_collections(turns: int) -> dict[int, list[float]]:
    """Seconds of each collection while the breakdown's hartflow runs go, by generation."""
    pauses: dict[int, list[float]] = defaultdict(list)
    started: dict[int, float] = {}

    def timer(phase: str, info: dict[str, Any]) -> None:
        thread = threading.get_ident()
        if phase == "start":
            started[thread] = time.perf_counter()
        elif thread in started:
            pauses[info["generation"]].append(time.perf_counter() - started.pop(thread))

    gc.callbacks.append(timer)
    try:
        asyncio.run(measure(turns, None, systems=("hartflow",)))
    finally:
        gc.callbacks.remove(timer)
    return pauses


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.gc_pauses", description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--freeze", action="store_true", help="gc.freeze() after the imports, as the worker does")
    args = parser.parse_args()
    if args.turns < 1:
        parser.error("--turns must be >= 1")
    if args.freeze:
        gc.collect()
        gc.freeze()
    pauses = _timed_collections(args.turns)
    counted = 2 * args.turns
    print(f"Garbage collections over {counted} turns (warm-up and timed run), {gc.get_freeze_count()} objects frozen\n")
    print("| generation | collections | ms in all | longest, ms | ms a turn |\n|---:|---:|---:|---:|---:|")
    for generation in sorted(pauses):
        times = pauses[generation]
        print(
            f"| {generation} | {len(times)} | {sum(times) * 1e3:.1f} | {max(times) * 1e3:.1f} "
            f"| {sum(times) * 1e3 / counted:.2f} |"
        )
    everything = [pause for times in pauses.values() for pause in times]
    print(f"| all | {len(everything)} | {sum(everything) * 1e3:.1f} | | {sum(everything) * 1e3 / counted:.2f} |")


if __name__ == "__main__":
    main()
