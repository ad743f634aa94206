"""A run that names a webhook reports its end: after the archive, it starts the delivery workflow
(``workflows/webhook.py``) and leaves it running (``ParentClosePolicy.ABANDON``), so the run closes at once and
the receiver's answer, retries or silence never hold it. Runs without a webhook issue no command here.

The body (JSON, built here so every attempt sends the same bytes):
``{"run_id", "thread_id", "workflow_id", "status", "run": {...}}``: ``status`` is LangGraph's run status (``success``,
``error``, ``interrupted`` for a cancelled run) and ``run`` the run's final view (``RunView``: hartflow's status,
stop reason, final message, turns, model, token usage, chain).
"""

from __future__ import annotations

import json
from typing import Any

from temporalio import workflow
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

from middlewares.context import TemporalRunContext
from vocabulary.contracts import WEBHOOK_WORKFLOW, WebhookDeliveryInput, WebhookTarget

LANGGRAPH_STATUS = {"completed": "success", "error": "error", "cancelled": "interrupted"}


def delivery_workflow_id(run_workflow_id: str, run_id: str) -> str:
    """One delivery per run (a ``.``, in no thread id, keeps it apart from every thread's own runs)."""
    return f"{run_workflow_id}.webhook.{run_id}"


def webhook_body(ctx: TemporalRunContext, target: WebhookTarget, final: dict[str, Any]) -> str:
    status = str(final.get("status"))
    payload = {
        "run_id": target.run_id or ctx.run_id,
        "thread_id": ctx.thread.thread_id,
        "workflow_id": ctx.workflow_id,
        "status": LANGGRAPH_STATUS.get(status, status),
        "run": final,
    }
    return json.dumps(payload, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


async def report_end(ctx: TemporalRunContext, target: WebhookTarget, final: dict[str, Any]) -> None:
    """Start the delivery of ``final`` (the archived view) to ``target``; returns once it is started."""
    workflow_id = delivery_workflow_id(ctx.workflow_id, ctx.run_id)
    delivery = WebhookDeliveryInput(target.url, webhook_body(ctx, target, final), workflow_id, target.deadline_seconds)
    try:
        await workflow.start_child_workflow(
            WEBHOOK_WORKFLOW,
            delivery,
            id=workflow_id,
            parent_close_policy=ParentClosePolicy.ABANDON,
            static_summary=f"webhook of run {ctx.run_id}",
        )
    except WorkflowAlreadyStartedError:
        workflow.logger.info("run %s: its webhook delivery was started already", ctx.run_id)
