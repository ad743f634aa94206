"""``multitask_strategy: enqueue``: a message sent while the thread's run is going waits in the thread's queue
(``workflows/thread_queue.py``, through ``workers/client/queue.py``) and runs when the runs before it have ended,
in order, each once. It is LangGraph's default.

The message is checked as fully as one that starts a run at once (``workers/api/starting.py``: model, settings,
files, images), and the run's whole start is prepared then; only then is it queued (nothing is written for a
refused one), and its API run recorded. Until the queue starts it the run has no workflow chain
(``workflow_run_id`` empty) and reads ``pending``, as on LangGraph; the ledger resolves it to its chain once it
started (``workers/api/ledger.py``), joining or streaming it waits for its start, and cancelling it takes it out
of the queue.

A thread whose queue is open takes even a message sent while it is idle into the queue, so a message never
overtakes one queued before it.
"""

from __future__ import annotations

from fastapi import HTTPException
from temporalio.client import WorkflowUpdateFailedError

from vocabulary.contracts import ThreadRef
from workers.api import records, status
from workers.api.deps import ApiContext
from workers.client.queue import ThreadQueue
from workers.client.runs import RunStart, queued

WITHDRAWN = "interrupted"
"""The status of a queued run cancelled before it started (LangGraph's for a cancelled run)."""


async def goes_to_queue(context: ApiContext, thread: ThreadRef, current: status.Chain) -> bool:
    """An ``enqueue`` request waits: the thread's run is going, or messages wait before it."""
    return current.active or await ThreadQueue(context.client).is_open(thread)


async def enqueue(context: ApiContext, thread: ThreadRef, record: records.RunRecord, run: RunStart) -> None:
    """Queue the checked, prepared ``run`` of the API run ``record`` and record it (``pending``)."""
    queue = ThreadQueue(context.client, context.config.temporal.task_queue)
    # Runs of the thread's previous queue resolve now: a new queue's answer no longer names them.
    await context.ledger.runs(thread, await context.ledger.chain(thread))
    try:
        await queue.enqueue(thread, queued(run, record.run_id))
    except WorkflowUpdateFailedError as exc:
        raise HTTPException(422, f"the thread's queue refused the message: {exc.cause or exc}") from None
    await context.ledger.save_run(thread, record)


async def until_started(context: ApiContext, thread: ThreadRef, record: records.RunRecord) -> bool:
    """Wait until the queued run ``record`` has started (``record`` then names its chain); ``False``: it never
    will (withdrawn). A run that is not queued returns at once."""
    if record.workflow_run_id:
        return True
    if record.final_status is not None:
        return False
    first = await ThreadQueue(context.client).started_as(thread, record.run_id)
    if not first:
        return False
    record.workflow_run_id = first
    await context.ledger.save_run(thread, record)
    return True


async def withdraw(context: ApiContext, thread: ThreadRef, record: records.RunRecord) -> bool:
    """Cancel the queued run ``record`` before it starts: ``True`` when it was taken out of the queue (recorded
    as :data:`WITHDRAWN`); ``False`` when it started meanwhile (``record`` then names its chain: cancel that)."""
    queue = ThreadQueue(context.client)
    first = await queue.withdraw(thread, record.run_id)
    if first is None:  # no queue open: it started (or was never queued)
        first = (await queue.started(thread)).get(record.run_id, "")
    if first:
        record.workflow_run_id = first
        await context.ledger.save_run(thread, record)
        return False
    record.final_status = WITHDRAWN
    await context.ledger.save_run(thread, record)
    return True
