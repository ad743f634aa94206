"""A user's schedules: each one a Temporal Schedule whose action starts a fire (``workflows/schedule_fire.py``).

Temporal keeps everything: when the schedule fires (``spec.py``), whether it is paused, its next fire times and
its recent fires; the action's input (``ScheduleFireInput``) holds the run request and what clients show. No
storage of hartflow's own is written, so a schedule and its record cannot disagree.

Per user: a schedule's Temporal id is made of its user and its UUID (``vocabulary/workflow_ids.schedule_id``), so
a caller can only ever name their own; lists are filtered by the user's id prefix.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from temporalio.client import (
    Client,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionResult,
    ScheduleActionStartWorkflow,
    ScheduleDescription,
    ScheduleHandle,
    ScheduleOverlapPolicy,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.client import WorkflowExecutionStatus as Status
from temporalio.service import RPCError, RPCStatusCode

from vocabulary.contracts import ScheduleFireInput, ScheduleFireResult
from vocabulary.workflow_ids import schedule_id, schedule_prefix
from workers.schedules.spec import ScheduleProblem, When, check, temporal_schedule, when_from_about


class ScheduleNotFound(LookupError):
    """No such schedule of this user (another user's is not found either)."""


@dataclass
class Fire:
    """One recent fire and what came of it."""

    workflow_id: str
    scheduled_at: datetime
    started_at: datetime
    outcome: str
    """``starting`` (the fire is still at work), ``started``, ``skipped`` or ``failed``."""
    thread_id: str | None = None
    run_id: str | None = None
    reason: str = ""


@dataclass
class ScheduleView:
    cron_id: str
    user_id: str
    fire: ScheduleFireInput
    when: When
    paused: bool
    created_at: datetime
    updated_at: datetime
    next_run_times: list[datetime] = field(default_factory=list)
    fires_total: int = 0
    finished: bool = False
    """A one-time schedule that has fired (it fires no more)."""
    recent: list[ScheduleActionResult] = field(default_factory=list)
    """The recent fires' workflows, oldest first (Temporal keeps the last ten): :meth:`Book.fires` reads them."""

    @property
    def title(self) -> str:
        return str(self.fire.about.get("title") or "")


class Book:
    """The schedules of one deployment (its Temporal client and the task queue its workers poll)."""

    def __init__(self, client: Client, task_queue: str) -> None:
        self.client = client
        self.task_queue = task_queue

    async def create(
        self, user_id: str, thread_id: str | None, payload: dict[str, Any], when: When, **options: Any
    ) -> ScheduleView:
        """A new schedule; ``options``: ``overlap``, ``title``, ``metadata``, ``paused``, ``extra`` (view fields)."""
        cron_id = str(uuid.uuid4())
        overlap = options.get("overlap") or "skip"
        if overlap == "allow" and thread_id is not None:
            raise ScheduleProblem("overlap: a schedule on one thread runs one run at a time ('skip')")
        when = check(when)
        about = {**when.about(), **options.get("extra", {}), "title": options.get("title") or ""}
        about["metadata"] = dict(options.get("metadata") or {})
        fire = ScheduleFireInput(schedule_id(user_id, cron_id), user_id, thread_id, payload, overlap, about)
        paused = bool(options.get("paused"))
        schedule = temporal_schedule(fire, when, self.task_queue, paused=paused, note="created paused" * paused)
        await self.client.create_schedule(fire.schedule_id, schedule)
        return await self.get(user_id, cron_id)

    async def get(self, user_id: str, cron_id: str) -> ScheduleView:
        return await self._view(user_id, cron_id, await self._describe(user_id, cron_id))

    async def of_user(self, user_id: str) -> list[ScheduleView]:
        """The user's schedules, newest first (Temporal lists them a moment after they are created)."""
        prefix = schedule_prefix(user_id)
        ids = [entry.id async for entry in await self.client.list_schedules() if entry.id.startswith(prefix)]
        found = await asyncio.gather(*(self._maybe(user_id, sid.removeprefix(prefix)) for sid in ids))
        return sorted((view for view in found if view is not None), key=lambda view: view.created_at, reverse=True)

    async def update(self, user_id: str, cron_id: str, change: Callable[[ScheduleView], ScheduleView]) -> ScheduleView:
        """Apply ``change`` to the schedule's view (its fire and ``when``; checked again) and keep the result."""
        current = await self.get(user_id, cron_id)
        changed = change(current)
        if changed.fire.overlap == "allow" and changed.fire.thread_id is not None:
            raise ScheduleProblem("overlap: a schedule on one thread runs one run at a time ('skip')")
        when = check(changed.when)
        fire = replace(changed.fire, about={**changed.fire.about, **when.about()})
        schedule = temporal_schedule(fire, when, self.task_queue, paused=changed.paused, note="updated")
        if current.finished and when.run_at is None:
            schedule.state.limited_actions, schedule.state.remaining_actions = False, 0

        def updater(_: ScheduleUpdateInput) -> ScheduleUpdate:
            return ScheduleUpdate(schedule=schedule)

        await self._call(cron_id, self._handle(user_id, cron_id).update(updater))
        return await self.get(user_id, cron_id)

    async def pause(self, user_id: str, cron_id: str, paused: bool = True) -> ScheduleView:
        handle = self._handle(user_id, cron_id)
        await self._call(cron_id, handle.pause(note="paused") if paused else handle.unpause(note="resumed"))
        return await self.get(user_id, cron_id)

    async def trigger(self, user_id: str, cron_id: str) -> None:
        """Fire now, paused or not (the schedule's own overlap policy still decides what the fire starts)."""
        await self._call(cron_id, self._handle(user_id, cron_id).trigger(overlap=ScheduleOverlapPolicy.ALLOW_ALL))

    async def delete(self, user_id: str, cron_id: str) -> None:
        """Stop the schedule; runs it started go on (they are the thread's)."""
        await self._call(cron_id, self._handle(user_id, cron_id).delete())

    async def fires(self, view: ScheduleView) -> list[Fire]:
        """The schedule's recent fires (the last ten), newest first, with what each one did."""
        return list(reversed(await asyncio.gather(*(self.fire_of(action) for action in view.recent))))

    async def fire_of(self, result: ScheduleActionResult) -> Fire:
        action = result.action
        assert isinstance(action, ScheduleActionExecutionStartWorkflow)
        handle = self.client.get_workflow_handle(
            action.workflow_id, run_id=action.first_execution_run_id, result_type=ScheduleFireResult
        )
        fire = Fire(action.workflow_id, result.scheduled_at, result.started_at, "starting")
        try:
            described = await handle.describe()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            return replace(fire, outcome="failed", reason="its record is gone (retention)")
        if described.status == Status.COMPLETED:
            done: ScheduleFireResult = await handle.result()
            return replace(fire, outcome=done.outcome, thread_id=done.thread_id, run_id=done.run_id, reason=done.reason)
        if described.status != Status.RUNNING:
            ended = described.status.name.lower() if described.status else "ended"
            return replace(fire, outcome="failed", reason=f"the fire {ended}")
        return fire

    def _handle(self, user_id: str, cron_id: str) -> ScheduleHandle:
        try:
            return self.client.get_schedule_handle(schedule_id(user_id, cron_id))
        except ValueError:
            raise ScheduleNotFound(cron_id) from None

    async def _call(self, cron_id: str, call: Any) -> Any:
        try:
            return await call
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise ScheduleNotFound(cron_id) from None
            raise

    async def _describe(self, user_id: str, cron_id: str) -> ScheduleDescription:
        description: ScheduleDescription = await self._call(cron_id, self._handle(user_id, cron_id).describe())
        return description

    async def _maybe(self, user_id: str, cron_id: str) -> ScheduleView | None:
        try:
            return await self.get(user_id, cron_id)
        except ScheduleNotFound:
            return None  # deleted between the list and the describe

    async def _view(self, user_id: str, cron_id: str, description: ScheduleDescription) -> ScheduleView:
        schedule, info = description.schedule, description.info
        action = schedule.action
        assert isinstance(action, ScheduleActionStartWorkflow)
        [fire] = await self.client.data_converter.decode(action.args, [ScheduleFireInput])
        state = schedule.state
        recent = [a for a in info.recent_actions if isinstance(a.action, ScheduleActionExecutionStartWorkflow)]
        return ScheduleView(
            cron_id=cron_id,
            user_id=user_id,
            fire=fire,
            when=when_from_about(fire.about),
            paused=state.paused,
            created_at=info.created_at,
            updated_at=info.last_updated_at or info.created_at,
            next_run_times=list(info.next_action_times),
            fires_total=info.num_actions,
            finished=state.limited_actions and state.remaining_actions == 0,
            recent=recent,
        )
