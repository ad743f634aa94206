"""``python -m bench.merge_cost``: what one ``add_messages`` merge costs as the conversation grows.

Every state update with messages (the model's answer, the tools' results, hooks' updates: about four a turn)
merges into the whole conversation (``vocabulary/messages.py``), so its cost is part of what grows from N = 100 to
N = 500 in ``python -m bench.breakdown``. A run merges through a ``MessageMerger``, which keeps its last result's
id index: it is timed too, merging into what it merged last (a run's usual merge). Run it on two checkouts to
compare them:

    python -m bench.merge_cost --sizes 100,500
"""

from __future__ import annotations

import argparse
import itertools
import timeit
from collections.abc import Callable

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from vocabulary.messages import MessageMerger, add_messages


def conversation(size: int) -> list[BaseMessage]:
    """``size`` messages of an agent loop: tool calls and their results."""
    messages: list[BaseMessage] = []
    for turn in range(size // 2):
        call = {"name": "ls", "args": {"path": "/mnt/user-data"}, "id": f"call-{turn}"}
        messages.append(AIMessage("", id=f"ai-{turn}", tool_calls=[call]))
        messages.append(ToolMessage("a.txt\nb.txt", tool_call_id=f"call-{turn}", id=f"tool-{turn}"))
    return messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="100,500", help="comma-separated conversation lengths")
    parser.add_argument("--number", type=int, default=2000, help="merges timed per size")
    args = parser.parse_args()
    for size in (int(part) for part in args.sizes.split(",")):
        seconds = timeit.timeit(_merge(conversation(size)), number=args.number)
        again = timeit.timeit(_merge_again(conversation(size)), number=args.number)
        print(
            f"N = {size}: {seconds / args.number * 1e6:.1f} µs per merge, "
            f"{again / args.number * 1e6:.1f} µs by the run's merger"
        )


def _merge(left: list[BaseMessage]) -> Callable[[], object]:
    """One merge of the model's answer into ``left``."""
    ids = itertools.count()
    answer = [AIMessage("done", id="answer")]
    return lambda: add_messages(left, answer, new_id=lambda: f"id-{next(ids)}")


def _merge_again(left: list[BaseMessage]) -> Callable[[], object]:
    """The model's answer merged, by a run's merger, into the conversation it merged last."""
    ids = itertools.count()
    merger = MessageMerger()
    answer = [AIMessage("done", id="answer")]
    state = [merger(left, answer, new_id=lambda: f"id-{next(ids)}")]

    def merge() -> None:
        state[0] = merger(state[0], answer, new_id=lambda: "unused")

    return merge


if __name__ == "__main__":
    main()
