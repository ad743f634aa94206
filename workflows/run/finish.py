"""A run's end, once after_agent ran: its final commit, the ``run_finished`` event with its closing status
(``workflows/run/view.py``), the archive (``workflows/run/archive.py``) and the webhook (``workflows/run/webhook.py``)
in runs started since the archive patch, the final status in its visibility; then the stream's subscribers and the
handlers still running are let go, and the run returns its view or raises its failure (a cancellation as it is,
anything else as ``RunFailed``).

Runs started since ``hartflow-close-in-one-activity`` commit and archive in one activity (``run.close``): one
workflow-task round instead of two. Their ``run_finished`` event is numbered first and held back until the commit
is stored (``RunEvents.hold``): a client that reads the thread when it sees the event finds the new state, and the
archive stores the event at the offset it is then published at. A stream too large for one activity input keeps
the separate commit and the archive in parts, the event still held until the commit is stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.exceptions import ApplicationError, is_cancelled_exception

import workflows.run.thread_io as thread_io
from middlewares import patches
from middlewares.context import TemporalRunContext
from vocabulary.contracts import HeldItem, WebhookTarget
from workflows.run.archive import archive_run, archives_runs, close_run, fits_one_part
from workflows.run.fields import RunFields
from workflows.run.io import RunStatus, RunView
from workflows.run.profile import RunProfile
from workflows.run.state_stream import PROGRESS_TOPIC
from workflows.run.view import closing_status, final_view, run_error
from workflows.run.visibility import Visibility
from workflows.run.webhook import report_end


@dataclass(frozen=True)
class _Ending:
    """How the run ends: its status, what ended it (``None``: nothing failed) and its view now."""

    status: RunStatus
    failure: Exception | asyncio.CancelledError | None
    view: Callable[[], RunView]
    finished: dict[str, Any]
    """The ``run_finished`` event's data."""

    def final_view(self) -> dict[str, Any]:
        return final_view(self.view(), self.status, self.failure)


async def finish(
    ctx: TemporalRunContext,
    fields: RunFields,
    profile: RunProfile,
    commits: asyncio.Lock,
    visibility: Visibility,
    stream: WorkflowStream,
    webhook: WebhookTarget | None,
    view: Callable[[], RunView],
    failure: Exception | asyncio.CancelledError | None,
) -> RunView:
    """Close the run: ``view`` is its view now, ``failure`` what ended it (``None`` when nothing failed).
    ``commits`` is held while the run commits (a subagent's approval commits through it too)."""
    status = closing_status(fields, failure)
    finished = {"status": status, "stop_reason": ctx.stop_reason, **run_error(fields, status, failure)}
    ending = _Ending(status, failure, view, finished)
    if ctx.patched(patches.CLOSE_IN_ONE_ACTIVITY):
        async with commits:
            final: dict[str, Any] | None = await _close(ctx, fields, profile, stream, ending)
    else:
        async with commits:
            await thread_io.commit(fields, ctx, profile)
        final = await _archive(ctx, fields, stream, ending) if archives_runs(ctx) else None
    if final is None:  # a run from before the archive
        visibility.set_status(status)
        ctx.emit("run_finished", **finished)
    else:
        if webhook is not None:
            await report_end(ctx, webhook, final)
        # Archived before the status turns final, so a client that saw the run settle finds the archive.
        visibility.set_status(status)
    # Stream subscribers get their last events now; waiting for them to stop polling would never end.
    stream.detach_pollers()
    await workflow.wait_condition(workflow.all_handlers_finished)
    if failure is None:
        return view()
    if is_cancelled_exception(failure):
        raise failure
    raise ApplicationError(f"run failed: {failure}", type="RunFailed", non_retryable=True) from failure


async def _close(
    ctx: TemporalRunContext, fields: RunFields, profile: RunProfile, stream: WorkflowStream, ending: _Ending
) -> dict[str, Any]:
    """Commit the run's final state and archive the run, ``run_finished`` held until the commit is stored;
    returns the view archived."""
    event = ctx.hold_event("run_finished", **ending.finished)
    final = ending.final_view()
    state = stream.get_state()
    if fits_one_part(state, final):
        commit = thread_io.commit_input(fields, ctx, profile)
        held = HeldItem(PROGRESS_TOPIC, event.as_dict())
        version = await close_run(ctx, commit, final, state, fields.version, held)
        if commit is not None:
            thread_io.committed(fields, version)
        ctx.release_event()
        return final
    await thread_io.commit(fields, ctx, profile)
    ctx.release_event()
    await archive_run(ctx, final, stream.get_state(), fields.version)
    return final


async def _archive(
    ctx: TemporalRunContext, fields: RunFields, stream: WorkflowStream, ending: _Ending
) -> dict[str, Any]:
    """Runs recorded before ``run.close``: once committed, publish ``run_finished`` and archive the run."""
    ctx.emit("run_finished", **ending.finished)
    final = ending.final_view()
    await archive_run(ctx, final, stream.get_state(), fields.version)
    return final
