"""The run's last step: store its final view and its whole workflow stream (the ``run.archive`` activity), so
clients answer ``status``, ``chain``, ``pending_input`` and ``events`` of a closed run from storage instead of
a replay (``activities/run_archive.py`` documents the stored format and the reader).

Runs whose history predates the archive replay without it (``hartflow-run-archive`` patch).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.contrib.workflow_streams import WorkflowStreamState
from temporalio.exceptions import ActivityError

from middlewares.context import ActivityOptions, TemporalRunContext
from vocabulary.contracts import RUN_ARCHIVE, RunArchiveInput

RUN_ARCHIVE_PATCH = "hartflow-run-archive"

_ARCHIVE_OPTIONS = ActivityOptions(
    start_to_close=timedelta(seconds=60),
    retry=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)),
)


def archives_runs() -> bool:
    """Whether this run ends with the archive (every run started since the patch)."""
    return workflow.patched(RUN_ARCHIVE_PATCH)


async def archive_run(ctx: TemporalRunContext, view: dict[str, Any], stream: WorkflowStreamState, version: int) -> None:
    """Store the archive. A failure that retries cannot fix (a conflicting archive, a wrong storage config) is
    logged, not raised: the run's state is committed already, and clients without an archive read its result."""
    try:
        await ctx.call(
            RUN_ARCHIVE,
            RunArchiveInput(ctx.thread, ctx.run_id, ctx.workflow_id, view, stream, version),
            result_type=type(None),
            summary="archive the run",
            options=_ARCHIVE_OPTIONS,
        )
    except ActivityError as exc:
        workflow.logger.error("run %s not archived: %s", ctx.run_id, exc.cause or exc)
