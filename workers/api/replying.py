"""Answering a paused run from a run request: the clarification's reply a request carries (``command.resume``, or
DeerFlow's HumanMessage with ``additional_kwargs.human_input_response``, or any message as free text), bounded
like a message, and its delivery through the run's validated update, where a pause another request answered first
is a 409."""

from __future__ import annotations

import json
from typing import Any

from fastapi import HTTPException
from temporalio.client import WorkflowQueryRejectedError
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.service import RPCError, RPCStatusCode

from vocabulary.approvals import ReviewInput
from workers.api import status
from workers.api.deps import ApiContext
from workers.api.run_request import RunCreate, message_content
from workers.client.runs import ReplyRefused, Runs
from workflows.run import ReplyInput


def reply_for(
    body: RunCreate, pending: dict[str, Any] | None, current: status.Chain, max_chars: int
) -> ReplyInput | None:
    """The answer this request gives the pending clarification, or ``None`` when it gives none. A reply is
    bounded like a message (``run.max_message_chars``); a resume while another run holds the thread is 409."""
    reply = _reply(body, pending, current)
    if reply is not None:
        size = len(reply.answer or "") + len(reply.option_id or "") + len(json.dumps(reply.fields, default=str))
        if size > max_chars + 2:  # "{}": no fields
            raise HTTPException(
                422, f"the reply is about {size} characters; the limit is {max_chars} (run.max_message_chars)"
            )
    return reply


def _reply(body: RunCreate, pending: dict[str, Any] | None, current: status.Chain) -> ReplyInput | None:
    request_id = (pending or {}).get("request_id")
    if body.command is not None and "resume" in body.command:
        if pending is None and current.active:
            raise HTTPException(409, f"the thread is busy: a run is {current.status}, there is nothing to resume")
        if pending is None:
            raise HTTPException(400, "command.resume: the thread is not interrupted, there is nothing to resume")
        resume = body.command["resume"]
        if isinstance(resume, str):
            return ReplyInput(answer=resume, request_id=request_id)
        return ReplyInput(resume.get("answer"), resume.get("option_id"), dict(resume.get("fields") or {}), request_id)
    message = body.last_human()
    if pending is None or message is None:
        return None
    response = (message.get("additional_kwargs") or {}).get("human_input_response")
    if isinstance(response, dict):
        if response.get("response_kind") == "option":
            return ReplyInput(
                option_id=str(response.get("option_id") or response.get("value")),
                request_id=_text_or_none(response.get("request_id")) or request_id,
            )
        return ReplyInput(
            answer=str(response.get("value") or ""), request_id=_text_or_none(response.get("request_id")) or request_id
        )
    return ReplyInput(answer=message_content(message), request_id=request_id)


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


_ANSWERED = (
    "the pause was answered already (by another request): the thread is no longer interrupted; read its state and runs"
)


async def stream_offset(context: ApiContext, workflow_id: str) -> int:
    """Where the resumed segment starts in the run's stream; a run closed since it was read as paused (another
    request's reply resumed it and it ran to the end) rejects the query: 409, like the late reply itself."""
    try:
        return await WorkflowStreamClient.create(context.client, workflow_id).get_offset()
    except WorkflowQueryRejectedError:
        raise HTTPException(409, _ANSWERED) from None
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        raise HTTPException(409, _ANSWERED) from None


async def answer(context: ApiContext, workflow_id: str, reply: ReplyInput | ReviewInput) -> None:
    """Send the reply (or a tool approval's review); a pause that another request answered first (many clients
    resuming at once) is 409. One that Temporal turned away before the run saw it changed nothing and is sent
    again (the run's answer to it is the client's: taken, 409 or 422), at most :data:`_SENDS` times, then 503."""
    try:
        await _send(context, workflow_id, reply)
    except ReplyRefused as exc:
        if exc.answered_already:
            raise HTTPException(409, f"{_ANSWERED}: {exc}") from None
        if exc.not_delivered:
            raise HTTPException(
                503, f"the run could not take the reply now, send it again: {exc}", headers={"Retry-After": "1"}
            ) from None
        raise HTTPException(422, f"reply refused: {exc}") from None
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        raise HTTPException(409, _ANSWERED) from None  # closed since: its last segment ran to the end


_SENDS = 3


async def _send(context: ApiContext, workflow_id: str, reply: ReplyInput | ReviewInput) -> None:
    runs = Runs(context.client)
    for send in range(_SENDS):
        try:
            if isinstance(reply, ReviewInput):
                await runs.review(workflow_id, reply)
            else:
                await runs.reply(workflow_id, reply)
            return
        except ReplyRefused as exc:
            if not exc.not_delivered or send == _SENDS - 1:
                raise
