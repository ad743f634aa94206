"""The SDK facts behind ``local_activity_error`` (``middlewares/context.py``).

A local activity that times out raises ``ActivityError`` caused by the timeout live, and the bare ``TimeoutError``
when its run is replayed from the activity's marker (temporalio 1.35). A run whose hook fell back on the first
would fail on the second: the next worker to replay it hits a nondeterminism error (a real run of it:
``tests/test_dynamic_context.py``, the memory store that never answers). A local activity that fails raises the bare
``ApplicationError`` both ways, where an activity's failure is an ``ActivityError`` caused by it: a hook that falls
back on an ``ActivityError`` let it end the run (a real run of it: ``tests/test_memory.py``, the memory queue that
refuses). If the SDK comes to raise other errors, these tests fail and the conversions can be looked at again."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer, Worker

from workers.testing import unique

SEEN: list[tuple[bool, str, str | None]] = []
"""What each execution of the workflow caught: (replaying, error type, its cause's type)."""


@activity.defn(name="never_answers")
async def never_answers(fail: bool) -> None:
    if fail:
        raise ApplicationError("refused", non_retryable=True)
    await asyncio.Event().wait()  # until the timeout cancels it


@workflow.defn(name="TimesOutLocally", sandboxed=False)
class TimesOutLocally:
    @workflow.run
    async def run(self, fail: bool) -> None:
        try:
            await workflow.execute_local_activity(
                never_answers,
                fail,
                start_to_close_timeout=timedelta(milliseconds=200),
                retry_policy=RetryPolicy(maximum_attempts=1),
            )
        except Exception as error:
            cause = type(error.__cause__).__name__ if error.__cause__ is not None else None
            SEEN.append((workflow.unsafe.is_replaying(), type(error).__name__, cause))


async def _errors(client: Client, *, fail: bool) -> list[tuple[bool, str, str | None]]:
    SEEN.clear()
    task_queue = unique("tq")
    async with Worker(client, task_queue=task_queue, workflows=[TimesOutLocally], activities=[never_answers]):
        handle = await client.start_workflow(TimesOutLocally.run, fail, id=unique("local"), task_queue=task_queue)
        await handle.result()
    await Replayer(workflows=[TimesOutLocally]).replay_workflow(await handle.fetch_history())
    return list(SEEN)


async def test_a_timed_out_local_activity_raises_one_error_live_and_another_replayed(client: Client) -> None:
    assert await _errors(client, fail=False) == [(False, "ActivityError", "TimeoutError"), (True, "TimeoutError", None)]


async def test_a_failed_local_activity_raises_its_bare_failure(client: Client) -> None:
    assert await _errors(client, fail=True) == [(False, "ApplicationError", None), (True, "ApplicationError", None)]
