"""The ``schedule.fire`` activity: start one fire's run exactly as the Agent Server starts a run request
(``workers/api/starting.py``, ``begin``), or skip it by the schedule's overlap policy (``spec.py``).

A fire on a thread whose run is still open (running, or paused on a question) skips: a new message there would
otherwise be taken as the answer to the question. On a fresh thread each fire, ``skip`` looks at the thread of the
schedule's previous fire. Retries are safe: a fire's fresh thread is named after the fire's workflow id, and a run
it started already (its API record carries the fire's workflow run id) is reported as started, not started twice.
"""

from __future__ import annotations

import uuid

from fastapi import HTTPException
from temporalio import activity
from temporalio.client import ScheduleActionExecutionStartWorkflow
from temporalio.client import WorkflowExecutionStatus as Status
from temporalio.exceptions import ApplicationError

from activities.contract import implements
from vocabulary.contracts import SCHEDULE_FIRE, ScheduleFireInput, ScheduleFireResult, ThreadRef
from workers.api import status
from workers.api.deps import ApiContext
from workers.api.run_request import RunCreate
from workers.api.starting import begin
from workers.config import HartflowConfig

FIRE_METADATA = "hartflow_schedule_fire"
"""The run record's metadata key naming the fire that started it (and ``hartflow_schedule``, its schedule)."""


class ScheduleFireActivities:
    def __init__(self, config: HartflowConfig) -> None:
        self._config = config
        self._context: ApiContext | None = None

    def context(self) -> ApiContext:
        if self._context is None:  # the worker's client, known only inside an activity
            self._context = ApiContext(self._config, activity.client())
        return self._context

    @implements(SCHEDULE_FIRE)
    async def fire(self, request: ScheduleFireInput) -> ScheduleFireResult:
        context = self.context()
        info = activity.info()
        # Two fires in one second share a workflow id (Temporal names them by the second): the run id tells them apart.
        fire_run = info.workflow_run_id or ""
        thread_id = request.thread_id or str(uuid.uuid5(uuid.NAMESPACE_URL, fire_run))
        thread = ThreadRef(request.user_id, thread_id)
        current = await context.ledger.chain(thread)
        if current.started_by is not None and current.started_by.metadata.get(FIRE_METADATA) == fire_run:
            return ScheduleFireResult("started", thread_id, current.started_by.run_id, "started (on a retry)")
        if current.active:
            return _skipped(thread_id, current)
        if request.thread_id is None and request.overlap == "skip":
            blocking = await self._previous_open(request, fire_run)
            if blocking is not None:
                return blocking
        metadata = {
            **dict(request.payload.get("metadata") or {}),
            "hartflow_schedule": request.schedule_id.rpartition(".")[2],
            FIRE_METADATA: fire_run,
        }
        body = RunCreate.model_validate(
            {**request.payload, "metadata": metadata, "multitask_strategy": "reject", "if_not_exists": "create"}
        )
        try:
            record = await begin(context, thread, body)
        except HTTPException as exc:
            if exc.status_code == 409:  # a run started in between: the busy-thread rule, as for any request
                return ScheduleFireResult("skipped", thread_id, None, f"the thread is busy: {exc.detail}")
            if exc.status_code >= 500:
                raise
            # The request cannot start (the thread or the agent deleted since): the next fire fails alike,
            # so no retry; the fire is listed as failed with the reason.
            raise ApplicationError(
                f"{exc.status_code}: {exc.detail}", type="ScheduleRefused", non_retryable=True
            ) from None
        return ScheduleFireResult("started", thread_id, record.run_id)

    async def _previous_open(self, request: ScheduleFireInput, fire_run: str) -> ScheduleFireResult | None:
        """The skip for a fresh-thread schedule whose previous fire's thread still has its run open."""
        client = self.context().client
        described = await client.get_schedule_handle(request.schedule_id).describe()
        earlier = [
            result.action
            for result in described.info.recent_actions
            if isinstance(result.action, ScheduleActionExecutionStartWorkflow)
            and result.action.first_execution_run_id != fire_run
        ]
        if not earlier:
            return None
        last = earlier[-1]
        handle = client.get_workflow_handle(
            last.workflow_id, run_id=last.first_execution_run_id, result_type=ScheduleFireResult
        )
        if (await handle.describe()).status != Status.COMPLETED:
            return None  # failed, or (a trigger beside a fire) still at work: it holds no run we know of
        previous: ScheduleFireResult = await handle.result()
        current = await self.context().ledger.chain(ThreadRef(request.user_id, previous.thread_id))
        return _skipped(previous.thread_id, current) if current.active else None


def _skipped(thread_id: str, current: status.Chain) -> ScheduleFireResult:
    reason = f"the previous run is still {current.status.replace('_', ' ')} (overlap policy 'skip')"
    run_id = current.started_by.run_id if current.started_by is not None else None
    return ScheduleFireResult("skipped", thread_id, run_id, reason)
