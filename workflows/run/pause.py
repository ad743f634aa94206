"""The run's durable pause (:meth:`Pause.hold`, which tool approvals share: ``workflows/run/approval.py``) and the
clarification on it: a run that asked the user commits, waits durably for a reply (the ``reply`` update or the
``clarification_reply`` signal), and goes on with the answer as the hidden HumanMessage DeerFlow's UI sends.

The run workflow registers the handlers (``workflows/run/workflow.py``) and hands them to :class:`Pause`, which
keeps the request and the reply in the run's fields (``RunFields.pending``, ``RunFields.reply``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from langchain_core.messages import HumanMessage
from temporalio import workflow
from temporalio.exceptions import ApplicationError

from middlewares.context import RunContext
from vocabulary.human_input import (
    InvalidReplyError,
    Reply,
    ReplyConflictError,
    parse_reply,
    response_message,
    validate_reply,
)
from workflows.run.fields import RunFields
from workflows.run.io import ReplyInput, RunStatus
from workflows.run.visibility import Visibility

STOP_CLARIFICATION_TIMEOUT = "clarification_timeout"
_ANSWERED = "the pending request was answered already: the first reply resumes the run"


class Pause:
    """Pauses the run on a clarification request for at most ``timeout`` and accepts the reply that resumes it."""

    def __init__(self, ctx: RunContext, fields: RunFields, visibility: Visibility, *, timeout: timedelta) -> None:
        self._ctx = ctx
        self._fields = fields
        self._visibility = visibility
        self._timeout = timeout

    async def wait(self, request: dict[str, Any], commit: Callable[[], Awaitable[None]]) -> HumanMessage | None:
        """Commit, wait durably for a reply, and return it as the hidden HumanMessage DeerFlow's UI sends (for
        the run to apply); ``None`` when the wait timed out, which stops the run."""
        ctx, fields = self._ctx, self._fields
        event = {"question": request.get("question")}
        if not await self.hold(request, commit, lambda: fields.reply is not None, self._timeout, event=event):
            fields.pending = None
            ctx.stop(STOP_CLARIFICATION_TIMEOUT)
            return None
        assert fields.reply is not None
        message = response_message(request, fields.reply, message_id=ctx.uuid())
        fields.reply = None
        fields.pending = None
        self._visibility.set_status("running")
        ctx.emit("resumed", request_id=request.get("request_id"))
        return message

    async def hold(
        self,
        request: dict[str, Any],
        commit: Callable[[], Awaitable[None]],
        answered: Callable[[], bool],
        timeout: timedelta,
        *,
        event: dict[str, Any],
        status: RunStatus = "awaiting_input",
        summary: str = "awaiting clarification",
    ) -> bool:
        """The pause itself, for a clarification or a tool approval (``workflows/run/approval.py``): commit, show
        ``request`` as the pending input, wait durably until ``answered`` (``True``) or ``timeout`` (``False``).
        The ``awaiting_input`` event ends an API run's segment either way."""
        fields = self._fields
        await commit()
        fields.pending = request
        self._visibility.set_status(status)
        self._ctx.emit("awaiting_input", request_id=request.get("request_id"), **event)
        try:
            await workflow.wait_condition(answered, timeout=timeout, timeout_summary=summary)
        except TimeoutError:
            return False
        return True

    def reply(self, answer: ReplyInput) -> None:
        """The ``reply`` update, once validated."""
        if self._fields.reply is not None:
            # Accepted with others in one activation (validators all run before the first handler): the
            # first reply won, this one fails as the validator would have refused it.
            raise ApplicationError(_ANSWERED, type=ReplyConflictError.__name__, non_retryable=True)
        self._accept(Reply(answer.answer, answer.option_id, dict(answer.fields), answer.request_id))

    def validate(self, answer: ReplyInput) -> None:
        """The ``reply`` update's validator: a refused reply leaves no history."""
        if self._fields.reply is not None:
            raise ReplyConflictError(_ANSWERED)
        validate_reply(
            self._fields.pending, Reply(answer.answer, answer.option_id, dict(answer.fields), answer.request_id)
        )

    def signal(self, payload: Any) -> None:
        """The ``clarification_reply`` signal: a reply it cannot use is ignored with a notice, never raised."""
        try:
            reply = parse_reply(payload)
            if self._fields.reply is not None:
                raise ReplyConflictError(_ANSWERED)
            validate_reply(self._fields.pending, reply)
        except InvalidReplyError as exc:
            self._fields.notice = f"ignored a clarification_reply signal: {exc}"
            workflow.logger.warning(self._fields.notice)
            self._visibility.update_details()
            return
        self._accept(reply)

    def _accept(self, reply: Reply) -> None:
        self._fields.reply = reply
        self._fields.notice = None
        # Flip now, so a client that waits for the run to settle right after replying sees it running.
        self._visibility.set_status("running")
