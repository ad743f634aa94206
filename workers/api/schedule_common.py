"""What both schedule route families share (``crons.py``: LangGraph's, ``scheduled_tasks.py``: DeerFlow's): the
schedules of the caller (``workers/schedules/book.py``), and the run request a schedule sends, checked as a run
request is (``run_request.py``) before anything is written."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException
from pydantic import ValidationError

from vocabulary.contracts import ThreadRef
from workers.api.deps import ApiContext, thread_ref
from workers.api.run_agent import requested_model, run_agent
from workers.api.run_request import RunCreate, message_content, model_spec, run_settings
from workers.schedules.book import Book, ScheduleNotFound, ScheduleView
from workers.schedules.spec import ScheduleProblem
from workflows.run import message_problem


def book(context: ApiContext) -> Book:
    return Book(context.client, context.config.temporal.task_queue)


async def checked_payload(context: ApiContext, user: str, payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` as each fire will send it, once it passes every check a run request passes (422, 404)."""
    try:
        body = RunCreate.model_validate(payload)
    except ValidationError as exc:
        problem = exc.errors()[0]
        raise HTTPException(422, f"{'.'.join(map(str, problem['loc']))}: {problem['msg']}") from None
    agent = await run_agent(context, user, body.assistant_id, body.option("agent_name"))
    messages = [m for m in (body.input or {}).get("messages") or [] if isinstance(m, dict)]
    human = [m for m in messages if (m.get("role") or m.get("type")) in ("user", "human")]
    text = message_content(human[-1]) if human else ""
    refusal = message_problem(text, context.config.run.max_message_chars)
    if refusal is not None:
        raise HTTPException(422, f"input.messages: {refusal} (a schedule sends a user message each time)")
    model_spec(context, requested_model(context.config, body.option("model_name"), agent))
    run_settings(context, body)
    return body.model_dump(include={"assistant_id", "input", "config", "context", "metadata"}, exclude_none=True)


async def existing_thread(context: ApiContext, user: str, thread_id: str) -> ThreadRef:
    thread = thread_ref(user, thread_id)
    if not await context.ledger.thread_exists(thread):
        raise HTTPException(404, f"thread {thread_id} not found")
    return thread


async def schedule_call(call: Any) -> Any:
    """Await a :class:`Book` call: an unknown schedule (or another user's) is 404, a refused one 422."""
    try:
        return await call
    except ScheduleNotFound as exc:
        raise HTTPException(404, f"schedule {str(exc)[:80]} not found") from None
    except ScheduleProblem as exc:
        raise HTTPException(422, str(exc)) from None


def user_message(view: ScheduleView) -> str:
    """The text each fire sends (its last user message)."""
    messages = (view.fire.payload.get("input") or {}).get("messages") or []
    return str(messages[-1].get("content", "")) if messages else ""
