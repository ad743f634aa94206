"""The clarification pause: a run that asked the user commits, waits durably for a reply (the ``reply`` update or
the ``clarification_reply`` signal), and goes on with the answer as the hidden HumanMessage DeerFlow's UI sends.

A mixin of the run workflow (``workflows/run/workflow.py``): the handlers are registered under these names on the run
workflow class, which inherits them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from vocabulary.human_input import (
    InvalidReplyError,
    Reply,
    ReplyConflictError,
    parse_reply,
    response_message,
    validate_reply,
)
from vocabulary.state import StateUpdate
from workflows.run.io import ReplyInput, RunView
from workflows.run.visibility import RunVisibility

STOP_CLARIFICATION_TIMEOUT = "clarification_timeout"
_ANSWERED = "the pending request was answered already: the first reply resumes the run"


class RunPause(RunVisibility):
    """Pauses the run on a clarification request and accepts the reply that resumes it."""

    _reply: Reply | None

    if TYPE_CHECKING:
        # Provided by the run workflow (the lifecycle) and by ``RunQueries`` (the view).
        async def _commit(self) -> None: ...
        def _apply(self, update: StateUpdate) -> None: ...
        def _view(self) -> RunView: ...

    async def _pause(self, request: dict[str, Any]) -> bool:
        """Commit, wait durably for a reply, and turn it into the hidden HumanMessage DeerFlow's UI sends.
        Returns False when the wait timed out."""
        ctx = self._ctx
        await self._commit()
        self._pending = request
        self._set_status("awaiting_input")
        ctx.emit("awaiting_input", request_id=request.get("request_id"), question=request.get("question"))
        try:
            await workflow.wait_condition(
                lambda: self._reply is not None,
                timeout=ctx.settings.clarification_timeout,
                timeout_summary="awaiting clarification",
            )
        except TimeoutError:
            self._pending = None
            ctx.stop_reason = STOP_CLARIFICATION_TIMEOUT
            ctx.emit("stopped", reason=STOP_CLARIFICATION_TIMEOUT)
            return False
        assert self._reply is not None
        message = response_message(request, self._reply, message_id=ctx.uuid())
        self._reply = None
        self._pending = None
        self._set_status("running")
        ctx.emit("resumed", request_id=request.get("request_id"))
        self._apply({"messages": [message]})
        return True

    @workflow.update(
        name="reply",
        description="Answer the pending clarification (validated; rejected replies leave no history).",
    )
    async def reply(self, answer: ReplyInput) -> RunView:
        if self._reply is not None:
            # Accepted with others in one activation (validators all run before the first handler): the
            # first reply won, this one fails as the validator would have refused it.
            raise ApplicationError(_ANSWERED, type=ReplyConflictError.__name__, non_retryable=True)
        self._accept(Reply(answer.answer, answer.option_id, dict(answer.fields), answer.request_id))
        return self._view()

    @reply.validator
    def _validate_reply(self, answer: ReplyInput) -> None:
        if self._reply is not None:
            raise ReplyConflictError(_ANSWERED)
        validate_reply(self._pending, Reply(answer.answer, answer.option_id, dict(answer.fields), answer.request_id))

    @workflow.signal(
        name="clarification_reply",
        description='Answer the pending clarification: a string, or {"answer", "option_id", "fields", "request_id"}.',
    )
    def clarification_reply(self, payload: Any) -> None:
        try:
            reply = parse_reply(payload)
            if self._reply is not None:
                raise ReplyConflictError(_ANSWERED)
            validate_reply(self._pending, reply)
        except InvalidReplyError as exc:
            self._notice = f"ignored a clarification_reply signal: {exc}"
            workflow.logger.warning(self._notice)
            self._update_details()
            return
        self._accept(reply)

    def _accept(self, reply: Reply) -> None:
        self._reply = reply
        self._notice = None
        # Flip now, so a client that waits for the run to settle right after replying sees it running.
        self._set_status("running")
