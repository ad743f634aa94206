"""A second message on a busy thread (LangGraph's ``multitask_strategy``) and ``cancel?action=rollback``.

* ``enqueue`` (the default, as on langgraph-api): the message waits in the thread's queue and runs when the runs
  before it have ended (``workers/api/queued.py``).
* ``reject``: 409 while a run is going.
* ``interrupt``: the active run is cancelled (its after_agent hooks run: sandbox release, memory), the request
  waits until it has closed, then the new run starts on what it committed. The interrupted run reads
  ``interrupted``.
* ``rollback``: as ``interrupt``, and the thread returns to the version the interrupted run started from: the new
  run loads that version and commits on top of the newest (the fork machinery: ``workers/api/forks.py``), and
  the interrupted run's records are deleted, as LangGraph deletes a rolled-back run.

A thread that waits for an answer is not busy: a new message answers it, whatever the strategy
(``workers/api/starting.py``).
"""

from __future__ import annotations

import contextlib

from fastapi import HTTPException
from temporalio.client import WorkflowFailureError

from activities.thread_store import ThreadConflictError
from vocabulary.contracts import CommitLineage, ThreadRef
from vocabulary.state import ThreadState
from workers.api import checkpoints, forks, records, status
from workers.api.deps import ApiContext
from workers.client.runs import Runs

SERVED = ("enqueue", "reject", "interrupt", "rollback")


def check_strategy(strategy: str) -> None:
    if strategy not in SERVED:
        raise HTTPException(422, f"multitask_strategy {strategy!r} is not served; use one of {', '.join(SERVED)}")


async def stop_active(context: ApiContext, thread: ThreadRef, current: status.Chain) -> status.Chain:
    """Cancel the thread's active chain and wait until it has closed (its after_agent ran, its state is
    committed); the thread's chain afterwards."""
    assert current.workflow_id is not None
    handle = context.client.get_workflow_handle(current.workflow_id, first_execution_run_id=current.first_run_id)
    await Runs(context.client).cancel(current.workflow_id, first_execution_run_id=current.first_run_id)
    with contextlib.suppress(WorkflowFailureError):  # cancelled (or failed meanwhile): closed either way
        await handle.result()
    return await context.ledger.chain(thread)


async def version_before(context: ApiContext, thread: ThreadRef, chain_run_id: str) -> int | None:
    """The version the chain's run started from (the parent of its first commit); ``None``: it committed nothing
    that is still kept."""
    for version in await context.ledger.versions(thread):
        record = await context.ledger.version(thread, version)
        if record is not None and (record.get("commit") or {}).get("run_id") == chain_run_id:
            return int(checkpoints.lineage(record)["parent"])
    return None


async def forget_runs(context: ApiContext, thread: ThreadRef, chain: status.Chain) -> None:
    """Delete the API runs of a rolled-back chain (every segment of it): each becomes a tombstone
    (``records.ROLLED_BACK``), so the chain's memo does not bring its first run back."""
    for record in await context.ledger.runs(thread, chain):
        if record.workflow_run_id == chain.first_run_id:
            record.final_status = records.ROLLED_BACK
            await context.ledger.save_run(thread, record)


async def interrupt_for_new_run(
    context: ApiContext, thread: ThreadRef, current: status.Chain, *, rollback: bool
) -> tuple[status.Chain, forks.Fork | None]:
    """Make way for a new run on a busy thread: the closed chain, and for a rollback where the new run starts."""
    stopped = await stop_active(context, thread, current)
    if not rollback or current.first_run_id is None:
        return stopped, None
    base = await version_before(context, thread, current.first_run_id)
    await forget_runs(context, thread, stopped)
    return stopped, None if base is None else forks.Fork(base)


async def roll_back(context: ApiContext, thread: ThreadRef, record: records.RunRecord) -> None:
    """``cancel?action=rollback``: stop the run's chain, commit the version it started from on top of the newest,
    delete its runs."""
    current = await context.ledger.chain(thread)
    if current.first_run_id == record.workflow_run_id and current.active:
        current = await stop_active(context, thread, current)
    base = await version_before(context, thread, record.workflow_run_id)
    if base is not None:
        kept = await context.ledger.version(thread, base) if base > 0 else {"state": {}}
        if kept is None:
            raise HTTPException(409, f"run {record.run_id} stopped; version v{base} it started from is not kept")
        _, newest, _ = await context.ledger.committed(thread)
        state = ThreadState.model_validate(kept["state"])
        try:
            await context.ledger.commit(
                thread, state, newest, f"api-rollback-{record.run_id}", CommitLineage(base, source="update")
            )
        except ThreadConflictError as exc:
            raise HTTPException(409, f"the thread changed during the rollback: {exc}") from None
    if current.first_run_id == record.workflow_run_id:
        await forget_runs(context, thread, current)
    else:
        record.final_status = records.ROLLED_BACK
        await context.ledger.save_run(thread, record)
