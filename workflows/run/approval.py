"""Tool approvals on the run's durable pause: the turn's gated calls (``middlewares/tool_approval.py``) become one
request (LangChain's ``action_requests`` / ``review_configs``), recorded in the thread's ``approvals`` channel and
committed; the run pauses on it (:meth:`workflows.run.pause.Pause.hold`, status ``awaiting_approval``) until every
call has a decision, from the ``review`` update (validated: a refused review leaves no history) or the
``approval_review`` signal, or until the deadline, when each undecided call gets its rule's on-timeout decision.
The decided record (who, when, what, the edited args) is committed with the state the run commits next. A
subagent's request is asked on its lead run, which forwards the decisions (``workflows/run/approval_relay.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from middlewares.context import RunContext
from vocabulary.approvals import (
    KIND,
    ReviewInput,
    is_approval,
    parse_review,
    timeout_decision,
    validate_review,
)
from vocabulary.human_input import InvalidReplyError
from workflows.run.approval_relay import SUBAGENT_KEY, forward, tell_lead
from workflows.run.fields import RunFields
from workflows.run.pause import Pause
from workflows.run.visibility import Visibility

Schemas = Callable[[], dict[str, dict[str, Any]]]
"""Each tool's JSON schema by name (the run's catalog, which MCP discovery may extend): edited args must fit."""


class Approvals:
    """Asks for the decisions on a turn's gated calls and accepts them."""

    def __init__(
        self, ctx: RunContext, fields: RunFields, visibility: Visibility, pause: Pause, schemas: Schemas
    ) -> None:
        self._ctx = ctx
        self._fields = fields
        self._visibility = visibility
        self._pause = pause
        self._schemas = schemas

    async def decide(
        self, actions: list[dict[str, Any]], commit: Callable[[], Awaitable[None]]
    ) -> dict[str, dict[str, Any]]:
        """Pause until each of ``actions`` (the middleware's ``approval_action`` interrupts) is decided; the
        decisions by tool call id."""
        ctx, fields = self._ctx, self._fields
        request = self._request(actions)
        fields.decisions = {}
        fields.apply({"approvals": [request]}, ctx.uuid)
        ids: list[str] = request["tool_call_ids"]
        relayed = ctx.is_subagent and workflow.info().parent is not None

        async def ask() -> None:
            await commit()
            if relayed:
                # Pending before the lead hears of it: the lead's forwarded decision must find it.
                fields.pending = request
                await tell_lead(request)

        answered = await self._pause.hold(
            request,
            ask,
            lambda: fields.decisions is not None and len(fields.decisions) == len(ids),
            timedelta(seconds=min(action["timeout_seconds"] for action in actions)),
            event={"approval": [action["name"] for action in request["action_requests"]]},
            status="awaiting_approval",
            summary="awaiting approval",
        )
        decisions = dict(fields.decisions or {})
        if not answered:
            for call_id, action, policy in zip(ids, request["action_requests"], request["on_timeout"], strict=True):
                if call_id not in decisions:
                    decisions[call_id] = self._stamp(
                        timeout_decision(policy, action["name"], request["deadline"]), "timeout", "timeout"
                    )
        fields.decisions = None
        fields.pending = None
        decided = {**request, "status": "decided", "decisions": [decisions[call_id] for call_id in ids]}
        fields.apply({"approvals": [decided]}, ctx.uuid)
        if relayed:
            await tell_lead(decided)
        self._visibility.set_status("running")
        ctx.emit("resumed", request_id=request["request_id"], decisions=[d["type"] for d in decided["decisions"]])
        return decisions

    def abandon(self) -> None:
        """The run ends (cancelled, failed) with requests undecided: recorded ``abandoned``, so the committed state
        offers nobody a decision the run can no longer take (an interrupt, a card, an inbox row)."""
        fields = self._fields
        undecided = [record for record in fields.state.approvals if record.get("status") == "pending"]
        if undecided:
            fields.apply({"approvals": [{**record, "status": "abandoned"} for record in undecided]}, self._ctx.uuid)

    def _request(self, actions: list[dict[str, Any]]) -> dict[str, Any]:
        ctx = self._ctx
        now = ctx.now()
        deadline = now + timedelta(seconds=min(action["timeout_seconds"] for action in actions))
        subagent = {SUBAGENT_KEY: ctx.workflow_id} if ctx.is_subagent else {}
        return {
            "kind": KIND,
            "request_id": f"approval:{ctx.uuid()}",
            "status": "pending",
            "user_id": ctx.thread.user_id,
            "thread_id": ctx.thread_id,
            "action_requests": [action["action_request"] for action in actions],
            "review_configs": [action["review_config"] for action in actions],
            "tool_call_ids": [action["tool_call_id"] for action in actions],
            "on_timeout": [action["on_timeout"] for action in actions],
            "requested_at": now.isoformat(),
            "deadline": deadline.isoformat(),
            **subagent,
        }

    # -- the answer ------------------------------------------------------------------------------------------

    def validate(self, review: ReviewInput) -> None:
        """The ``review`` update's validator: a refused review leaves no history."""
        self._checked(review)

    async def review(self, review: ReviewInput) -> None:
        """The ``review`` update, once validated (checked again: reviews accepted in one activation all passed
        their validators before the first handler ran)."""
        try:
            checked = self._checked(review)
        except InvalidReplyError as exc:
            raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from None
        await self._accept(checked, review.reviewer, "update")

    async def signal(self, payload: Any) -> None:
        """The ``approval_review`` signal: a review it cannot use is ignored with a notice, never raised."""
        try:
            review = parse_review(payload)
            checked = self._checked(review)
        except InvalidReplyError as exc:
            self._fields.notice = f"ignored an approval_review signal: {exc}"
            workflow.logger.warning(self._fields.notice)
            self._visibility.update_details()
            return
        await self._accept(checked, review.reviewer, "signal")

    def _checked(self, review: ReviewInput) -> dict[str, dict[str, Any]]:
        fields = self._fields
        pending = fields.pending if is_approval(fields.pending) and fields.decisions is not None else None
        return validate_review(pending, fields.decisions or {}, review, self._schemas())

    async def _accept(self, checked: dict[str, dict[str, Any]], reviewer: str | None, via: str) -> None:
        fields = self._fields
        pending = fields.pending
        assert fields.decisions is not None and pending is not None
        for call_id, decision in checked.items():
            fields.decisions[call_id] = self._stamp(decision, reviewer or via, via)
        fields.notice = None
        if len(fields.decisions) == len(pending["tool_call_ids"]):
            # Flip now, so a client that waits for the run to settle right after deciding sees it running.
            self._visibility.set_status("running")
        else:
            self._visibility.update_details()
        if SUBAGENT_KEY in pending and not self._ctx.is_subagent:
            await forward(pending, checked, reviewer)

    def _stamp(self, decision: dict[str, Any], reviewer: str, via: str) -> dict[str, Any]:
        """The audit of one decision: who (the API's or the CLI's user; ``signal`` or ``timeout`` otherwise),
        when (the run's clock) and how it arrived."""
        return {**decision, "reviewer": reviewer, "decided_at": self._ctx.now().isoformat(), "via": via}
