"""A schedule's fire: the workflow a Temporal Schedule starts each time it fires (``workers/schedules/book.py``).

It is one activity (``schedule.fire``, ``workers/schedules/fire.py``) that starts the scheduled run exactly as the
Agent Server starts every run, so the run's workflow id, search attributes and API record, and the busy-thread
rule, are those of any run. The fire ends when its run has started (or was skipped): the run itself may then wait
days for an answer, and what the next fire does meanwhile is the schedule's overlap policy, decided in the
activity. The fire's result (``ScheduleFireResult``) is what clients list as the schedule's recent runs.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from vocabulary.contracts import SCHEDULE_FIRE, ScheduleFireInput, ScheduleFireResult

SCHEDULE_FIRE_WORKFLOW = "HartflowScheduleFire"


@workflow.defn(name=SCHEDULE_FIRE_WORKFLOW)
class ScheduleFireWorkflow:
    @workflow.run
    async def run(self, input: ScheduleFireInput) -> ScheduleFireResult:
        result: ScheduleFireResult = await workflow.execute_activity(
            SCHEDULE_FIRE,
            input,
            result_type=SCHEDULE_FIRE.output,
            summary=f"start the run of schedule {input.schedule_id}",
            start_to_close_timeout=timedelta(seconds=60),
            # Temporal or storage down for a while: the fire keeps trying for a bounded time, then fails (the
            # schedule's next fire is unaffected); a refused request fails at once (non-retryable, fire.py).
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30), maximum_attempts=10
            ),
        )
        return result
