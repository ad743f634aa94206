"""A subagent's tool approval, asked on its lead run: the user answers the run they see.

A subagent is a child workflow (``workflows/run/delegate.py``) that never commits to the thread, so nobody would
find its pause. When its gated calls wait (``workflows/run/approval.py``), the child sends its request, marked
with its workflow id (``subagent_workflow_id``), to the lead as the ``subagent_approval`` signal, and again once
decided. The lead (:class:`RelayedApprovals`) records the request in the thread's ``approvals`` channel, commits,
and shows it as its own pending input (status ``awaiting_approval``): the API's interrupt, ``hartflow approve
THREAD`` and ``hartflow runs --awaiting approval`` all see it on the lead. A decision the lead accepts (its
``review`` update or ``approval_review`` signal, validated as for its own calls) is forwarded to the child as the
child's ``approval_review`` signal; the child runs or rejects the calls, or applies its timeout policy, and reports
the decided request, which the lead records with its own audit of who decided (committed with its next commit).
Parallel subagents' requests are shown one after the other, in the order they arrived.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from temporalio import workflow
from temporalio.exceptions import FailureError

from middlewares.context import RunContext
from workflows.run.fields import RunFields
from workflows.run.visibility import Visibility

SUBAGENT_APPROVAL_SIGNAL = "subagent_approval"
SUBAGENT_KEY = "subagent_workflow_id"


async def tell_lead(request: dict[str, Any]) -> None:
    """The child's side: send the request (pending or decided) to the lead run."""
    parent = workflow.info().parent
    if parent is None:
        return
    lead = workflow.get_external_workflow_handle(parent.workflow_id, run_id=parent.run_id)
    try:
        await lead.signal(SUBAGENT_APPROVAL_SIGNAL, request)
    except FailureError as exc:
        # The lead is gone (cancelled, ended): the subagent is cancelled with it.
        workflow.logger.info("approval %s not relayed to the lead: %s", request.get("request_id"), exc)


async def forward(request: dict[str, Any], checked: dict[str, dict[str, Any]], reviewer: str | None) -> None:
    """The lead's side of a decision on a subagent's request: the child's ``approval_review`` signal."""
    review = {
        "decisions": list(checked.values()),
        "call_ids": list(checked),
        "request_id": request["request_id"],
        "reviewer": reviewer,
    }
    child = workflow.get_external_workflow_handle(request[SUBAGENT_KEY])
    try:
        await child.signal("approval_review", review)
    except FailureError as exc:
        # The child ended meanwhile (its timeout decided, or it was cancelled): its report settles the request.
        workflow.logger.info("decision on %s not delivered to the subagent: %s", request["request_id"], exc)


class RelayedApprovals:
    """The lead's side: its subagents' requests, shown one at a time as its pending input."""

    def __init__(
        self, ctx: RunContext, fields: RunFields, visibility: Visibility, commit: Callable[[], Awaitable[None]]
    ) -> None:
        self._ctx = ctx
        self._fields = fields
        self._visibility = visibility
        self._commit = commit
        self._waiting: list[dict[str, Any]] = []
        """The subagents' pending requests, in arrival order; the first is shown."""

    async def received(self, request: dict[str, Any]) -> None:
        """The ``subagent_approval`` signal: a child's request asked, or decided."""
        if not isinstance(request, dict) or not isinstance(request.get(SUBAGENT_KEY), str):
            workflow.logger.warning("ignored a subagent_approval signal without a subagent: %r", request)
            return
        if request.get("status") == "pending":
            self._waiting.append(request)
            if len(self._waiting) == 1:
                await self._show(request)
            return
        await self._closed(request)

    async def _show(self, request: dict[str, Any]) -> None:
        ctx, fields = self._ctx, self._fields
        fields.apply({"approvals": [request]}, ctx.uuid)
        # The API and `hartflow runs --awaiting approval` read the pending request from the committed state.
        await self._commit()
        if not self._waiting or self._waiting[0]["request_id"] != request["request_id"]:
            return  # decided (its timeout) while the commit ran
        fields.decisions = {}
        fields.pending = request
        self._visibility.set_status("awaiting_approval")
        names = [action["name"] for action in request["action_requests"]]
        ctx.emit("awaiting_input", request_id=request["request_id"], approval=names, subagent=request[SUBAGENT_KEY])

    async def _closed(self, decided: dict[str, Any]) -> None:
        ctx, fields = self._ctx, self._fields
        ids = [request["request_id"] for request in self._waiting]
        if decided.get("request_id") not in ids:
            return
        index = ids.index(decided["request_id"])
        self._waiting.pop(index)
        pending = fields.pending
        shown = pending is not None and pending.get("request_id") == decided["request_id"]
        # The lead's own stamps say who decided through it (its API's or CLI's user, update or signal); the
        # child's stand for what it decided alone (a timeout).
        stamps = (fields.decisions or {}) if shown else {}
        decisions = [
            stamps.get(call_id) or decision
            for call_id, decision in zip(decided["tool_call_ids"], decided["decisions"], strict=True)
        ]
        fields.apply({"approvals": [{**decided, "decisions": decisions}]}, ctx.uuid)
        if shown:
            fields.pending = None
            fields.decisions = None
            self._visibility.set_status("running")
            ctx.emit("resumed", request_id=decided["request_id"], decisions=[d["type"] for d in decisions])
        if index == 0 and self._waiting:
            await self._show(self._waiting[0])
