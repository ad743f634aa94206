"""The ``thread.run_closed`` activity: wait until a thread's newest run chain has closed.

The thread's queue workflow (``workflows/thread_queue.py``) starts its next message only once the run before it
is over; a run the Agent Server or the CLI started is no child of the queue, so the queue learns of its end here,
through the worker's own Temporal client (``activity.client()``). The wait is Temporal's long poll on the
workflow's result (following continue-as-new), with a heartbeat beside it: a worker that dies mid-wait misses a
heartbeat and the wait moves to another worker.
"""

from __future__ import annotations

import asyncio
import contextlib

from temporalio import activity
from temporalio.client import WorkflowFailureError
from temporalio.service import RPCError, RPCStatusCode

from activities.contract import implements
from vocabulary.contracts.thread_queue import THREAD_RUN_CLOSED, RunClosed, RunClosedInput

HEARTBEAT_SECONDS = 5.0


async def _heartbeat() -> None:
    while True:
        activity.heartbeat()
        await asyncio.sleep(HEARTBEAT_SECONDS)


@implements(THREAD_RUN_CLOSED)
async def run_closed(input: RunClosedInput) -> RunClosed:
    handle = activity.client().get_workflow_handle(input.workflow_id)
    beating = asyncio.create_task(_heartbeat())
    try:
        with contextlib.suppress(WorkflowFailureError):  # failed, cancelled, terminated: closed all the same
            await handle.result(follow_runs=True)
        description = await handle.describe()
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        return RunClosed("none")
    finally:
        beating.cancel()
    return RunClosed(description.status.name.lower() if description.status is not None else "none")
