"""``python -m bench.loop_steps``: the event-loop steps a turn costs the worker's process, hartflow beside the floor.

Every callback the process's event loops run (a task's step, a future's callback, a thread's wake-up, a timer)
is counted by what it runs, while ``bench.breakdown`` runs each system on a fresh server (an N-turn warm-up run,
then the timed N-turn run: steps a turn are counted over both, 2N turns). Unlike CPU time, which moves with a
shared machine's load by more than a millisecond a turn, the count is the same run after run, and each step has
a price (the floor's profile spends most of its "event loop" CPU between steps: ``python -m bench.cpu_profile``),
so a change that adds or removes awaits, tasks, threads or timers shows here exactly.

    python -m bench.loop_steps --turns 100 --kinds 12
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.events
from collections import Counter
from collections.abc import Callable
from typing import Any

from bench.breakdown import SYSTEMS, measure


def _kind(callback: Callable[..., Any]) -> str:
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coroutine = owner.get_coro()
        return "task " + getattr(coroutine, "__qualname__", type(coroutine).__name__)
    return getattr(callback, "__qualname__", type(callback).__name__)


def count_steps(turns: int, system: str) -> Counter[str]:
    """The steps of ``system``'s breakdown runs, by kind."""
    steps: Counter[str] = Counter()
    run = asyncio.events.Handle._run

    def counted(handle: asyncio.events.Handle) -> None:
        steps[_kind(handle._callback)] += 1  # type: ignore[attr-defined]
        run(handle)

    asyncio.events.Handle._run = counted  # type: ignore[method-assign,assignment]
    try:
        asyncio.run(measure(turns, None, systems=(system,)))
    finally:
        asyncio.events.Handle._run = run  # type: ignore[method-assign]
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.loop_steps", description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--kinds", type=int, default=10, help="list the N most frequent kinds of step")
    args = parser.parse_args()
    if args.turns < 1:
        parser.error("--turns must be >= 1")
    per_system = {system: count_steps(args.turns, system) for system in SYSTEMS}
    counted = 2 * args.turns
    print(f"Event-loop steps a turn (over {counted} turns: the warm-up run and the timed run)\n")
    print("| system | steps a turn |\n|---|---:|")
    for system, steps in per_system.items():
        print(f"| {system} | {sum(steps.values()) / counted:.1f} |")
    kinds = Counter({kind: 0 for steps in per_system.values() for kind in steps})
    for steps in per_system.values():
        kinds.update(steps)
    print("\n| step | " + " | ".join(per_system) + " |\n|---|" + "---:|" * len(per_system))
    for kind, _ in kinds.most_common(args.kinds):
        counts = " | ".join(f"{steps[kind] / counted:.1f}" for steps in per_system.values())
        print(f"| {kind} | {counts} |")


if __name__ == "__main__":
    main()
