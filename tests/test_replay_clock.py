"""The SDK fact behind "decide by the run's state, not by ``workflow.now()``" (README, Changing workflow code
safely; ``workflows/run/visibility.py``): a worker that takes up a run whose last workflow task issued no commands
runs that task's code again at the clock of the task it was given (an update's here), not at the clock it ran at,
and as if live (temporalio/sdk-rust#1146, #1606). A skip decided by the clock there can become a command, which a
later replay, reading the first clock, does not issue: a nondeterminism error. If this test fails, the SDK reads
the clock the same both ways."""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Replayer, Worker

from workers.testing import unique

CLOCKS: list[tuple[bool, datetime]] = []
"""Each execution's clock after the signal: (replaying, workflow.now())."""


@workflow.defn(name="ReadsTheClock", sandboxed=False)
class ReadsTheClock:
    def __init__(self) -> None:
        self._signalled = False
        self._done = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self._signalled)
        CLOCKS.append((workflow.unsafe.is_replaying(), workflow.now()))  # no command: the task issues none
        await workflow.wait_condition(lambda: self._done)

    @workflow.signal
    def go(self) -> None:
        self._signalled = True

    @workflow.update
    def finish(self) -> None:
        self._done = True


async def test_a_worker_taking_up_a_run_reruns_a_task_without_commands_at_a_later_clock(client: Client) -> None:
    task_queue = unique("tq")
    async with Worker(client, task_queue=task_queue, workflows=[ReadsTheClock]):
        handle = await client.start_workflow(ReadsTheClock.run, id=unique("clock"), task_queue=task_queue)
        await handle.signal(ReadsTheClock.go)
        await handle.query("__stack_trace")  # answered after the signal's task: a query sees every event before it
    assert len(CLOCKS) == 1, "the signal's task ran on the first worker"
    async with Worker(client, task_queue=task_queue, workflows=[ReadsTheClock]):
        await handle.execute_update(ReadsTheClock.finish)
        await handle.result()
    await Replayer(workflows=[ReadsTheClock]).replay_workflow(await handle.fetch_history())
    (first, first_clock), (taken_up, taken_up_clock), (replayed, replayed_clock) = CLOCKS
    assert (first, taken_up, replayed) == (False, False, True)
    assert taken_up_clock > first_clock == replayed_clock
