"""``python -m bench.cpu_profile``: where the worker's Python CPU goes per turn, every thread included.

cProfile (``bench.breakdown --profile``) sees only the event loop's thread, but the SDK runs workflow activations
in a thread pool and sync work (the transcript store) in another. ``py-spy`` samples every thread; with ``--gil``
it keeps only samples holding the GIL, i.e. Python CPU. Record a breakdown run, then summarise it here:

    py-spy record --gil --format raw --rate 200 -o /tmp/spy.txt -- python -m bench.breakdown --turns 200
    python -m bench.cpu_profile /tmp/spy.txt --turns 200 --rate 200

Each sample goes to the first category (in the order below) whose test matches its stack; ms/turn is samples /
rate / turns. The startup (imports, building the worker) is shown but is not part of a turn. ``--functions N``
also lists the N functions of hartflow's workflow code that hold the most of its samples (each sample goes to
the innermost hartflow frame on its stack: the function itself, or the SDK or library code it called).
``--floor PROFILE`` puts a profile of the Temporal floor beside it, category by category (record it with
``python -m bench.breakdown --turns N --system floor``; its turns are given by ``--floor-turns``, default
``--turns``).
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable
from pathlib import Path

Stack = list[str]

_OWN_PACKAGES = ("workflows", "middlewares", "vocabulary")


def _has(*needles: str) -> Callable[[Stack], bool]:
    return lambda frames: any(needle in frame for frame in frames for needle in needles)


def _in_workflow_code(frames: Stack) -> bool:
    """hartflow's workflow packages, or the floor's workflow (``bench/floor.py``)."""
    return _has("_WorkflowInstanceImpl.activate")(frames) and any(
        "FloorWorkflow." in frame or any(f"({package}/" in frame for package in _OWN_PACKAGES) for frame in frames
    )


CATEGORIES: list[tuple[str, Callable[[Stack], bool]]] = [
    (
        "startup: imports, building the worker",
        lambda f: (
            not _has("_handle_activation", "_ActivityWorker")(f) and _has("_find_and_load", "in_process_worker")(f)
        ),
    ),
    ("workflow: SDK serialization-context lookups", _has("get_serialization_context", "get_external_store")),
    ("workflow: its own code (hartflow: workflows/, middlewares/, vocabulary/)", _in_workflow_code),
    ("workflow: SDK activation (the workflow instance's event loop)", _has("_WorkflowInstanceImpl.activate")),
    ("workflow: payload visiting, encode/decode", _has("decode_activation", "encode_completion", "PayloadVisitor")),
    ("workflow: other SDK work", _has("_WorkflowWorker")),
    ("model.invoke: transcript store", _has("TranscriptStore")),
    ("model.invoke: the model call (scripted, langchain)", _has("ModelActivities", "FloorActivities.model")),
    ("tool.execute", _has("ToolActivities", "FloorActivities.tool")),
    ("activities: SDK (payload conversion, completion)", _has("_ActivityWorker")),
    ("other: event loop, bridge polls", lambda _: True),
]


def summarise(lines: list[str]) -> Counter[str]:
    samples: Counter[str] = Counter()
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        category = next(name for name, matches in CATEGORIES if matches(frames))
        samples[category] += int(count)
    return samples


def workflow_functions(lines: list[str]) -> Counter[str]:
    """Samples of hartflow's workflow code by the innermost hartflow function on the stack."""
    samples: Counter[str] = Counter()
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        frames = stack.split(";")
        if not stack or not _in_workflow_code(frames):
            continue
        own = [frame for frame in frames if any(f"({package}/" in frame for package in _OWN_PACKAGES)]
        name, _, where = own[-1].partition(" (")
        samples[f"{name} ({where.rsplit(':', 1)[0]})"] += int(count)
    return samples


def _per_turn(samples: Counter[str], rate: int, turns: int) -> dict[str, float]:
    return {name: samples[name] / rate / turns * 1000 for name, _ in CATEGORIES}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("profile", type=Path, help="py-spy record --format raw output")
    parser.add_argument("--turns", type=int, required=True, help="the turns of the recorded run")
    parser.add_argument("--rate", type=int, default=100, help="py-spy's --rate (samples per second)")
    parser.add_argument("--functions", type=int, default=0, help="also list the N busiest workflow-code functions")
    parser.add_argument("--floor", type=Path, help="a py-spy profile of the floor's breakdown run, shown beside")
    parser.add_argument("--floor-turns", type=int, help="the turns of the floor's recorded run (default: --turns)")
    args = parser.parse_args(argv)
    lines = args.profile.read_text(encoding="utf-8").splitlines()
    samples = summarise(lines)
    startup = CATEGORIES[0][0]
    in_turns = sum(count for name, count in samples.items() if name != startup)
    print(
        f"Python CPU over {args.turns} turns: {in_turns / args.rate / args.turns * 1000:.1f} ms/turn "
        f"(plus {samples[startup] / args.rate:.1f} s of startup)\n"
    )
    ms = _per_turn(samples, args.rate, args.turns)
    if args.floor is None:
        print("| where | ms/turn | share |\n|---|---:|---:|")
        for name, _ in CATEGORIES[1:]:
            print(f"| {name} | {ms[name]:.2f} | {samples[name] / max(in_turns, 1):.0%} |")
    else:
        floor_samples = summarise(args.floor.read_text(encoding="utf-8").splitlines())
        floor = _per_turn(floor_samples, args.rate, args.floor_turns or args.turns)
        print("| where | ms/turn | floor ms/turn | difference |\n|---|---:|---:|---:|")
        for name, _ in CATEGORIES[1:]:
            print(f"| {name} | {ms[name]:.2f} | {floor[name]:.2f} | {ms[name] - floor[name]:+.2f} |")
        total, floor_total = (sum(v for k, v in per.items() if k != startup) for per in (ms, floor))
        print(f"| **all** | {total:.2f} | {floor_total:.2f} | {total - floor_total:+.2f} |")
    if args.functions:
        print("\n| workflow-code function (innermost hartflow frame) | ms/turn |\n|---|---:|")
        for function, count in workflow_functions(lines).most_common(args.functions):
            print(f"| {function} | {count / args.rate / args.turns * 1000:.2f} |")


if __name__ == "__main__":
    main()
