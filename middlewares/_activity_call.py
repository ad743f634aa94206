"""Call an activity by its reference, so ``mypy --strict`` checks the argument and the result.

``RunContext.call`` takes a bare name and a ``result_type`` restated at every call site; nothing checked that
the argument is the activity's input type or that ``result_type`` is its output type. An
:class:`~vocabulary.activity_ref.ActivityRef` carries both, so here they come from the one declaration the
activity is registered from (``activities/contract.py``).
"""

from __future__ import annotations

from typing import TypeVar

from middlewares.context import ActivityOptions, RunContext
from vocabulary.activity_ref import ActivityRef

InputT = TypeVar("InputT")
OutputT = TypeVar("OutputT")


async def call_activity(
    ctx: RunContext,
    ref: ActivityRef[InputT, OutputT],
    arg: InputT,
    *,
    summary: str,
    options: ActivityOptions | None = None,
) -> OutputT:
    """Run the activity ``ref`` with ``arg`` through ``ctx`` (``summary`` is what the Web UI shows)."""
    return await ctx.call(ref, arg, result_type=ref.output, summary=summary, options=options)
