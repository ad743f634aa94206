"""A run's end, once after_agent ran and its state is committed: the ``run_finished`` event with its closing status
(``workflows/run/view.py``), the archive (``workflows/run/archive.py``) and the webhook (``workflows/run/webhook.py``)
in runs started since the archive patch, the final status in its visibility; then the stream's subscribers and the
handlers still running are let go, and the run returns its view or raises its failure (a cancellation as it is,
anything else as ``RunFailed``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.exceptions import ApplicationError, is_cancelled_exception

from middlewares.context import TemporalRunContext
from vocabulary.contracts import WebhookTarget
from workflows.run.archive import archive_run, archives_runs
from workflows.run.fields import RunFields
from workflows.run.io import RunView
from workflows.run.view import closing_status, final_view, run_error
from workflows.run.visibility import Visibility
from workflows.run.webhook import report_end


async def finish(
    ctx: TemporalRunContext,
    fields: RunFields,
    visibility: Visibility,
    stream: WorkflowStream,
    webhook: WebhookTarget | None,
    view: Callable[[], RunView],
    failure: Exception | asyncio.CancelledError | None,
) -> RunView:
    """Close the run: ``view`` is its view now, ``failure`` what ended it (``None`` when nothing failed)."""
    status = closing_status(fields, failure)
    if archives_runs(ctx):
        # Archived before the status turns final, so a client that saw the run settle finds the archive.
        ctx.emit("run_finished", status=status, stop_reason=ctx.stop_reason, **run_error(fields, status, failure))
        final = final_view(view(), status, failure)
        await archive_run(ctx, final, stream.get_state(), fields.version)
        if webhook is not None:
            await report_end(ctx, webhook, final)
        visibility.set_status(status)
    else:
        visibility.set_status(status)
        ctx.emit(
            "run_finished", status=fields.status, stop_reason=ctx.stop_reason, **run_error(fields, status, failure)
        )
    # Stream subscribers get their last events now; waiting for them to stop polling would never end.
    stream.detach_pollers()
    await workflow.wait_condition(workflow.all_handlers_finished)
    if failure is None:
        return view()
    if is_cancelled_exception(failure):
        raise failure
    raise ApplicationError(f"run failed: {failure}", type="RunFailed", non_retryable=True) from failure
