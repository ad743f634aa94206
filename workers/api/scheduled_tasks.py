"""DeerFlow's scheduled tasks (``frontend/src/core/scheduled-tasks/api.ts`` of bytedance/deer-flow), in the
shapes its page reads (``types.ts``: ``ScheduledTask``, ``ScheduledTaskRun``), on the same schedules as LangGraph's
cron routes (``crons.py``): a task is a schedule, its ``id`` the cron's.

``schedule_type`` ``cron`` takes ``schedule_spec.cron`` (or hartflow's ``@every N{s,m,h,d}``), ``once`` takes
``schedule_spec.run_at`` (a naive time is in ``timezone``). ``context_mode`` ``reuse_thread`` fires on
``thread_id``, ``fresh_thread_per_run`` on a new thread each time. A task's runs are its recent fires (Temporal
keeps the last ten), each with the status of the run it started.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, HTTPException
from pydantic import Field

from vocabulary.contracts import ThreadRef
from workers.api.deps import Context, Thread, User
from workers.api.limits import ApiBody
from workers.api.schedule_common import book, checked_payload, existing_thread, schedule_call, user_message
from workers.schedules.book import Book, Fire, ScheduleView
from workers.schedules.spec import When

router = APIRouter()
_RUN_STATUS = {"pending": "queued", "running": "running", "success": "success", "interrupted": "interrupted"}


class TaskFields(ApiBody):
    context_mode: Literal["fresh_thread_per_run", "reuse_thread"] | None = None
    thread_id: str | None = None
    title: str | None = Field(None, min_length=1, max_length=500)
    prompt: str | None = Field(None, min_length=1)
    schedule_spec: dict[str, Any] | None = None
    timezone: str | None = None


class TaskCreate(TaskFields):
    context_mode: Literal["fresh_thread_per_run", "reuse_thread"] = "fresh_thread_per_run"
    title: str = Field(min_length=1, max_length=500)
    prompt: str = Field(min_length=1)
    schedule_type: Literal["once", "cron"]
    schedule_spec: dict[str, Any]
    timezone: str = "UTC"


def when_of(schedule_type: str, spec: dict[str, Any], timezone: str) -> When:
    """``schedule_spec`` as a :class:`When` (422 for a spec without its field)."""
    field = "cron" if schedule_type == "cron" else "run_at"
    value = spec.get(field)
    if not isinstance(value, str) or not value.strip():
        raise HTTPException(422, f"schedule_spec.{field}: a {schedule_type} schedule needs it (text)")
    if schedule_type == "cron":
        return When(schedule=value, timezone=timezone)
    try:
        return When(run_at=datetime.fromisoformat(value), timezone=timezone)
    except ValueError:
        raise HTTPException(422, f"schedule_spec.run_at: {value[:60]!r} is not an ISO date and time") from None


def payload_of(prompt: str) -> dict[str, Any]:
    return {"assistant_id": "lead_agent", "input": {"messages": [{"role": "user", "content": prompt}]}}


async def task_view(schedules: Book, view: ScheduleView) -> dict[str, Any]:
    last = await schedules.fire_of(view.recent[-1]) if view.recent else None
    when = view.when
    status = "paused" if view.paused else "completed" if view.finished else "enabled"
    return {
        "id": view.cron_id,
        "thread_id": view.fire.thread_id,
        "context_mode": "reuse_thread" if view.fire.thread_id else "fresh_thread_per_run",
        "title": view.title,
        "prompt": user_message(view),
        "schedule_type": "cron" if when.schedule else "once",
        "schedule_spec": {"cron": when.schedule} if when.schedule else {"run_at": view.fire.about.get("run_at")},
        "timezone": when.timezone,
        "status": status,
        "next_run_at": view.next_run_times[0].isoformat() if view.next_run_times and not view.paused else None,
        "last_run_at": last.started_at.isoformat() if last else None,
        "last_run_id": last.run_id if last else None,
        "last_thread_id": last.thread_id if last else None,
        "last_error": last.reason if last and last.outcome in ("failed", "skipped") else None,
        "run_count": view.fires_total,
        "created_at": view.created_at.isoformat(),
        "updated_at": view.updated_at.isoformat(),
    }


async def task_run_view(context: Context, user: str, cron_id: str, fire: Fire) -> dict[str, Any]:
    status = {"starting": "queued", "skipped": "skipped", "failed": "failed"}.get(fire.outcome, "running")
    if fire.outcome == "started" and fire.thread_id and fire.run_id:
        thread = ThreadRef(user, fire.thread_id)
        try:
            run = await context.ledger.run(thread, fire.run_id)
            status = _RUN_STATUS.get(await context.ledger.status_of(thread, run), "failed")
        except HTTPException:
            status = "failed"  # the thread was deleted since
    return {
        "id": fire.workflow_id,
        "task_id": cron_id,
        "thread_id": fire.thread_id,
        "run_id": fire.run_id,
        "scheduled_for": fire.scheduled_at.isoformat(),
        "trigger": "scheduled",
        "status": status,
        "error": fire.reason or None if status in ("failed", "skipped") else None,
        "started_at": fire.started_at.isoformat(),
        "finished_at": None,
        "created_at": fire.started_at.isoformat(),
    }


async def _thread_for(context: Context, user: str, mode: str, thread_id: str | None) -> str | None:
    if mode == "fresh_thread_per_run":
        return None
    if not thread_id:
        raise HTTPException(422, "thread_id: reuse_thread needs the thread")
    return (await existing_thread(context, user, thread_id)).thread_id


@router.get("/scheduled-tasks")
async def list_tasks(user: User, context: Context) -> list[dict[str, Any]]:
    schedules = book(context)
    return list(await asyncio.gather(*(task_view(schedules, view) for view in await schedules.of_user(user))))


@router.post("/scheduled-tasks")
async def create_task(body: TaskCreate, user: User, context: Context) -> dict[str, Any]:
    thread_id = await _thread_for(context, user, body.context_mode, body.thread_id)
    payload = await checked_payload(context, user, payload_of(body.prompt))
    when = when_of(body.schedule_type, body.schedule_spec, body.timezone)
    schedules = book(context)
    view = await schedule_call(schedules.create(user, thread_id, payload, when, title=body.title))
    return await task_view(schedules, view)


@router.get("/scheduled-tasks/{task_id}")
async def get_task(task_id: str, user: User, context: Context) -> dict[str, Any]:
    schedules = book(context)
    return await task_view(schedules, await schedule_call(schedules.get(user, task_id)))


@router.patch("/scheduled-tasks/{task_id}")
async def update_task(task_id: str, body: TaskFields, user: User, context: Context) -> dict[str, Any]:
    schedules = book(context)
    current = await schedule_call(schedules.get(user, task_id))
    mode = body.context_mode or ("reuse_thread" if current.fire.thread_id else "fresh_thread_per_run")
    thread_id = await _thread_for(context, user, mode, body.thread_id or current.fire.thread_id)
    payload = await checked_payload(context, user, payload_of(body.prompt)) if body.prompt else current.fire.payload
    timezone = body.timezone or current.when.timezone
    kind = "cron" if current.when.schedule else "once"
    when = when_of(kind, body.schedule_spec, timezone) if body.schedule_spec is not None else current.when
    when.timezone = timezone

    def change(view: ScheduleView) -> ScheduleView:
        view.fire.thread_id, view.fire.payload, view.when = thread_id, payload, when
        if body.title is not None:
            view.fire.about = {**view.fire.about, "title": body.title}
        return view

    return await task_view(schedules, await schedule_call(schedules.update(user, task_id, change)))


@router.post("/scheduled-tasks/{task_id}/pause")
async def pause_task(task_id: str, user: User, context: Context) -> dict[str, Any]:
    schedules = book(context)
    return await task_view(schedules, await schedule_call(schedules.pause(user, task_id)))


@router.post("/scheduled-tasks/{task_id}/resume")
async def resume_task(task_id: str, user: User, context: Context) -> dict[str, Any]:
    schedules = book(context)
    return await task_view(schedules, await schedule_call(schedules.pause(user, task_id, paused=False)))


@router.post("/scheduled-tasks/{task_id}/trigger")
async def trigger_task(task_id: str, user: User, context: Context) -> dict[str, Any]:
    await schedule_call(book(context).trigger(user, task_id))
    return {"id": task_id, "triggered": True}


@router.delete("/scheduled-tasks/{task_id}")
async def delete_task(task_id: str, user: User, context: Context) -> dict[str, Any]:
    await schedule_call(book(context).delete(user, task_id))
    return {"id": task_id, "deleted": True}


@router.get("/scheduled-tasks/{task_id}/runs")
async def task_runs(task_id: str, user: User, context: Context) -> list[dict[str, Any]]:
    schedules = book(context)
    view = await schedule_call(schedules.get(user, task_id))
    fires = await schedules.fires(view)
    return list(await asyncio.gather(*(task_run_view(context, user, task_id, fire) for fire in fires)))


@router.get("/threads/{thread_id}/scheduled-tasks")
async def thread_tasks(thread: Thread, context: Context) -> list[dict[str, Any]]:
    await existing_thread(context, thread.user_id, thread.thread_id)  # an unknown thread is 404, as DeerFlow's
    schedules = book(context)
    views = [view for view in await schedules.of_user(thread.user_id) if view.fire.thread_id == thread.thread_id]
    return list(await asyncio.gather(*(task_view(schedules, view) for view in views)))
