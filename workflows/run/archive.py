"""The run's last step: store its final view and its whole workflow stream (the ``run.archive`` activity), so
clients answer ``status``, ``chain``, ``pending_input`` and ``events`` of a closed run from storage instead of
a replay (``activities/run_archive.py`` documents the stored format and the reader).

Runs whose history predates the archive replay without it (``hartflow-run-archive`` patch). A stream too large
for one activity input (a run whose messages carry tens of MB: every topic holds them, base64-encoded) is sent
in parts, each under ``PART_BUDGET_CHARS`` (``hartflow-run-archive-parts`` patch, taken only by such runs).

Runs started since ``hartflow-close-in-one-activity`` archive together with their final commit, in one
``run.close`` activity (:func:`close_run`), whenever the stream fits one input (``workflows/run/finish.py``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.contrib.workflow_streams import WorkflowStreamState
from temporalio.exceptions import ActivityError

from middlewares import patches
from middlewares._activity_call import call_activity
from middlewares.context import ActivityOptions, TemporalRunContext
from vocabulary.contracts import (
    RUN_ARCHIVE,
    RUN_CLOSE,
    HeldItem,
    RunArchiveInput,
    RunCloseInput,
    ThreadCommitInput,
)

PART_BUDGET_CHARS = 16 * 1024 * 1024
"""Encoded stream characters per ``run.archive`` call: with JSON framing well under the 50 MB a payload may have
in external storage (a single item is bounded by the activity that produced its content)."""

_ARCHIVE_OPTIONS = ActivityOptions(
    start_to_close=timedelta(seconds=60),
    retry=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)),
)


def archives_runs(ctx: TemporalRunContext) -> bool:
    """Whether this run ends with the archive (every run started since the patch)."""
    return ctx.patched(patches.RUN_ARCHIVE)


async def archive_run(ctx: TemporalRunContext, view: dict[str, Any], stream: WorkflowStreamState, version: int) -> None:
    """Store the archive. A failure that retries cannot fix (a conflicting archive, a wrong storage config) is
    logged, not raised: the run's state is committed already, and clients without an archive read its result."""
    slices = _slices(stream, reserve=len(str(view)))
    if len(slices) > 1 and not ctx.patched(patches.RUN_ARCHIVE_PARTS):
        slices = [stream]
    try:
        for part, piece in enumerate(slices):
            last = part == len(slices) - 1
            await call_activity(
                ctx,
                RUN_ARCHIVE,
                RunArchiveInput(
                    ctx.thread, ctx.run_id, ctx.workflow_id, view if last else {}, piece, version, part, len(slices)
                ),
                summary="archive the run" if len(slices) == 1 else f"archive the run, part {part + 1}/{len(slices)}",
                options=_ARCHIVE_OPTIONS,
            )
    except ActivityError as exc:
        workflow.logger.error("run %s not archived: %s", ctx.run_id, exc.cause or exc)


def fits_one_part(stream: WorkflowStreamState, view: dict[str, Any]) -> bool:
    """Whether ``stream`` and ``view`` go in one ``run.archive`` or ``run.close`` input."""
    return len(_slices(stream, reserve=len(str(view)))) == 1


async def close_run(
    ctx: TemporalRunContext,
    commit: ThreadCommitInput | None,
    view: dict[str, Any],
    stream: WorkflowStreamState,
    version: int,
    held: HeldItem,
) -> int:
    """Make the run's final ``commit`` (``None``: it commits nothing) and store its archive, ``held`` after the
    stream's items, in one activity (``activities/run_close.py``); returns the version committed (``version``
    without a commit). A commit that fails raises, as ``thread.commit`` does; an archive that fails is logged."""
    archive = RunArchiveInput(ctx.thread, ctx.run_id, ctx.workflow_id, view, stream, version, held=held)
    try:
        result = await call_activity(
            ctx,
            RUN_CLOSE,
            RunCloseInput(commit, archive),
            summary="commit thread state, archive the run" if commit is not None else "archive the run",
            options=_ARCHIVE_OPTIONS,
        )
    except ActivityError as exc:
        if commit is not None:
            raise
        workflow.logger.error("run %s not archived: %s", ctx.run_id, exc.cause or exc)
        return version
    if result.archive_error is not None:
        workflow.logger.error("run %s not archived: %s", ctx.run_id, result.archive_error)
    return result.version


def _slices(stream: WorkflowStreamState, *, reserve: int) -> list[WorkflowStreamState]:
    """``stream`` cut into consecutive slices of at most :data:`PART_BUDGET_CHARS` encoded characters, each leaving
    room for ``reserve`` (the view, which the last one carries) and keeping its offsets; one slice when it fits."""
    slices: list[WorkflowStreamState] = []
    start, size = 0, reserve
    for index, item in enumerate(stream.log):
        if size + len(item.data) > PART_BUDGET_CHARS and index > start:
            slices.append(WorkflowStreamState(log=stream.log[start:index], base_offset=stream.base_offset + start))
            start, size = index, reserve
        size += len(item.data)
    last = WorkflowStreamState(log=stream.log[start:], base_offset=stream.base_offset + start)
    if not slices:
        return [stream]
    return [*slices, last]
