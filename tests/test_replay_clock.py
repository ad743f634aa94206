"""The SDK fact behind "decide by the run's state, never by ``workflow.now()``" (README, Changing workflow code
safely; ``workflows/run/visibility.py``, ``middlewares/_breaker_gate.py``): a worker that takes up a run whose last
workflow task issued no commands may join that task to the one it was given and run both at one clock, as if live
(temporalio/sdk-rust#1146, #1606); a replay runs each at its own. Here the joined code reads the later clock; in a
run of ``tests/test_embedded_stack.py`` the taking-up worker ran a tool result's code at the earlier one (its
breaker check skipped as fresh, replayed as stale). A decision by the clock in such a task can be a command in one
and none in the other: a nondeterminism error. If this test fails, the SDK reads the clock the same both ways."""

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
