"""LangGraph's cron routes (``langgraph-sdk``'s ``client.crons``): schedules whose fires start runs.

``POST /threads/{thread_id}/runs/crons`` fires on that thread; ``POST /runs/crons`` on a fresh thread each fire
(hartflow keeps those threads: ``on_run_completed`` ``delete`` is refused, a run may wait days for an answer).
``schedule`` is a cron expression or ``@every N{s,m,h,d}`` (``workers/schedules/spec.py``); ``enabled`` pauses
and resumes (``PATCH``). hartflow adds ``start_time``, ``overlap`` (``skip``/``allow``), ``next_run_dates``,
``GET /runs/crons/{cron_id}`` with the recent fires, and ``POST /runs/crons/{cron_id}/trigger`` (fire now).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, HTTPException, Response
from pydantic import Field

from workers.api.deps import Context, User
from workers.api.limits import ApiBody
from workers.api.schedule_common import book, checked_payload, existing_thread, schedule_call
from workers.schedules.book import Fire, ScheduleView
from workers.schedules.spec import When

router = APIRouter()
_PAYLOAD_KEYS = ("assistant_id", "input", "config", "context", "metadata", "webhook")


class CronFields(ApiBody):
    input: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    webhook: str | None = None
    timezone: str | None = None
    end_time: datetime | None = None
    start_time: datetime | None = None
    enabled: bool | None = None
    on_run_completed: Literal["keep", "delete"] | None = None
    overlap: Literal["skip", "allow"] | None = None


class CronCreate(CronFields):
    schedule: str = Field(min_length=1, max_length=200)
    assistant_id: str = "hartflow"
    multitask_strategy: Literal["reject", "interrupt", "rollback", "enqueue"] | None = None


class CronUpdate(CronFields):
    schedule: str | None = Field(None, min_length=1, max_length=200)


class CronSearch(ApiBody):
    assistant_id: str | None = None
    thread_id: str | None = None
    enabled: bool | None = None
    metadata: dict[str, Any] | None = None
    limit: int = Field(10, ge=1, le=1000)
    offset: int = Field(0, ge=0)
    sort_by: Literal[
        "cron_id", "assistant_id", "thread_id", "next_run_date", "end_time", "created_at", "updated_at"
    ] = "created_at"
    sort_order: Literal["asc", "desc"] = "desc"
    select: list[str] | None = None


def cron_view(view: ScheduleView, fires: list[Fire] | None = None) -> dict[str, Any]:
    about, when = view.fire.about, view.when
    shown: dict[str, Any] = {
        "cron_id": view.cron_id,
        "assistant_id": view.fire.payload.get("assistant_id", "hartflow"),
        "thread_id": view.fire.thread_id,
        "on_run_completed": None if view.fire.thread_id else "keep",
        "schedule": when.schedule or (when.run_at.isoformat() if when.run_at else ""),
        "timezone": when.timezone,
        "start_time": about.get("start_at"),
        "end_time": about.get("end_at"),
        "created_at": view.created_at.isoformat(),
        "updated_at": view.updated_at.isoformat(),
        "payload": view.fire.payload,
        "user_id": view.user_id,
        "next_run_date": view.next_run_times[0].isoformat() if view.next_run_times and not view.paused else None,
        "next_run_dates": [moment.isoformat() for moment in view.next_run_times],
        "metadata": about.get("metadata") or {},
        "enabled": not view.paused,
        "overlap": view.fire.overlap,
        "fires": view.fires_total,
    }
    if fires is not None:
        shown["recent_fires"] = [fire_view(fire) for fire in fires]
    return shown


def fire_view(fire: Fire) -> dict[str, Any]:
    return {
        "fire_id": fire.workflow_id,
        "scheduled_at": fire.scheduled_at.isoformat(),
        "started_at": fire.started_at.isoformat(),
        "outcome": fire.outcome,
        "thread_id": fire.thread_id,
        "run_id": fire.run_id,
        "reason": fire.reason,
    }


async def _create(context: Context, user: str, thread_id: str | None, body: CronCreate) -> dict[str, Any]:
    if body.on_run_completed == "delete":
        raise HTTPException(422, "on_run_completed 'delete' is not served: hartflow keeps a scheduled run's thread")
    if body.multitask_strategy not in (None, "reject"):
        raise HTTPException(422, "multitask_strategy: a schedule's fires follow its overlap policy ('skip', 'allow')")
    raw = body.model_dump(include=set(_PAYLOAD_KEYS), exclude_none=True)
    payload = await checked_payload(context, user, raw)
    if body.webhook:
        payload["webhook"] = body.webhook  # the run request's own field: the runs report where it says
    when = When(schedule=body.schedule, timezone=body.timezone or "UTC", start_at=body.start_time, end_at=body.end_time)
    options = {"overlap": body.overlap, "metadata": body.metadata, "paused": body.enabled is False}
    view = await schedule_call(book(context).create(user, thread_id, payload, when, **options))
    return cron_view(view)


@router.post("/runs/crons")
async def create_cron(body: CronCreate, user: User, context: Context) -> dict[str, Any]:
    """A schedule whose every fire runs on a new thread of the caller's."""
    return await _create(context, user, None, body)


@router.post("/threads/{thread_id}/runs/crons")
async def create_thread_cron(thread_id: str, body: CronCreate, user: User, context: Context) -> dict[str, Any]:
    """A schedule whose fires run on the caller's thread (404 for an unknown one)."""
    thread = await existing_thread(context, user, thread_id)
    return await _create(context, user, thread.thread_id, body)


@router.post("/runs/crons/search")
async def search_crons(body: CronSearch, user: User, context: Context) -> list[dict[str, Any]]:
    views = [cron_view(view) for view in await book(context).of_user(user)]
    found = [view for view in views if _matches(view, body)]
    found.sort(key=lambda view: str(view.get(body.sort_by) or ""), reverse=body.sort_order == "desc")
    page = found[body.offset : body.offset + body.limit]
    if body.select:
        page = [{key: view[key] for key in body.select if key in view} for view in page]
    return page


@router.post("/runs/crons/count")
async def count_crons(body: CronSearch, user: User, context: Context) -> int:
    return sum(_matches(cron_view(view), body) for view in await book(context).of_user(user))


@router.get("/runs/crons/{cron_id}")
async def get_cron(cron_id: str, user: User, context: Context) -> dict[str, Any]:
    schedules = book(context)
    view = await schedule_call(schedules.get(user, cron_id))
    return cron_view(view, await schedules.fires(view))


@router.patch("/runs/crons/{cron_id}")
async def update_cron(cron_id: str, body: CronUpdate, user: User, context: Context) -> dict[str, Any]:
    schedules = book(context)
    current = await schedule_call(schedules.get(user, cron_id))
    if body.on_run_completed == "delete":
        raise HTTPException(422, "on_run_completed 'delete' is not served: hartflow keeps a scheduled run's thread")
    changed = body.model_dump(include=set(_PAYLOAD_KEYS), exclude_none=True)
    payload = current.fire.payload
    if changed:
        payload = await checked_payload(context, user, {**payload, **changed})
        if body.webhook or payload.get("webhook"):
            payload["webhook"] = body.webhook or current.fire.payload.get("webhook")
    sent = body.model_fields_set

    def change(view: ScheduleView) -> ScheduleView:
        when = view.when
        if body.schedule is not None:
            when.schedule, when.run_at = body.schedule, None
        when.timezone = body.timezone or when.timezone
        when.end_at = body.end_time if "end_time" in sent else when.end_at
        when.start_at = body.start_time if "start_time" in sent else when.start_at
        view.fire.payload = payload
        view.fire.overlap = body.overlap or view.fire.overlap
        if body.metadata is not None:
            view.fire.about = {**view.fire.about, "metadata": body.metadata}
        view.paused = view.paused if body.enabled is None else not body.enabled
        return view

    return cron_view(await schedule_call(schedules.update(user, cron_id, change)))


@router.post("/runs/crons/{cron_id}/trigger", status_code=202)
async def trigger_cron(cron_id: str, user: User, context: Context) -> dict[str, Any]:
    """Fire now (hartflow's; paused or not): the run starts as at any fire, by the overlap policy."""
    await schedule_call(book(context).trigger(user, cron_id))
    return {"cron_id": cron_id, "triggered": True}


@router.delete("/runs/crons/{cron_id}", status_code=204)
async def delete_cron(cron_id: str, user: User, context: Context) -> Response:
    await schedule_call(book(context).delete(user, cron_id))
    return Response(status_code=204)


def _matches(view: dict[str, Any], body: CronSearch) -> bool:
    metadata = view["metadata"]
    return (
        (body.assistant_id is None or view["assistant_id"] == body.assistant_id)
        and (body.thread_id is None or view["thread_id"] == body.thread_id)
        and (body.enabled is None or view["enabled"] == body.enabled)
        and all(metadata.get(key) == value for key, value in (body.metadata or {}).items())
    )
