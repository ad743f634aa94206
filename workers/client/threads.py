"""Which Temporal workflow holds a user's thread, and which stored runs a thread delete may remove.

Every client (the CLI, the API, the bench and the soak) finds a thread's runs here, never by building an id
itself. A thread's runs live under ``hartflow:{user}:{thread}`` (``vocabulary/workflow_ids.py``), so one user's
thread id says nothing about another's. Runs started before ids were per user live under the legacy
``hartflow-{thread}``, shared by every user's thread of that name: such a run is this thread's only when its
``HartflowUserId`` search attribute names this user (every hartflow client set it at the start); a run without
it, or another user's, is nobody's thread here. New runs never start under the legacy id, so a per-user
workflow, once there, is always newer than any legacy one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from activities.storage import ObjectStore
from activities.thread_lifecycle import DeletedThread, delete_thread, stored_runs
from vocabulary.contracts import ThreadRef
from vocabulary.workflow_ids import legacy_run_workflow_id, run_workflow_id
from workers.client.queue import ThreadQueue
from workflows import search_attributes as sa


@dataclass(frozen=True)
class ThreadWorkflow:
    """The thread's newest workflow: its id (per user, or legacy) and Temporal's description of its latest run."""

    workflow_id: str
    description: WorkflowExecutionDescription

    @property
    def running(self) -> bool:
        return self.description.status == WorkflowExecutionStatus.RUNNING


START_INPUTS = "null"
"""The run-id key segment of payloads stored before their run exists (a start's input): the SDK driver's."""


class ThreadBusyError(Exception):
    """A run of the thread is open: the thread cannot be deleted."""


async def describe(client: Client, workflow_id: str, run_id: str | None = None) -> WorkflowExecutionDescription | None:
    """The workflow's (latest, or ``run_id``'s) description; ``None`` when Temporal has no such execution (a
    ``run_id`` that is no run id at all, as a stray storage key may hold, is none either)."""
    try:
        return await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND or (run_id and exc.status == RPCStatusCode.INVALID_ARGUMENT):
            return None
        raise


def owner(description: WorkflowExecutionDescription) -> str | None:
    """The user a run belongs to, as its start recorded it."""
    return description.typed_search_attributes.get(sa.USER_ID)


async def find(client: Client, thread: ThreadRef) -> ThreadWorkflow | None:
    """The workflow holding ``thread``'s newest run, or ``None`` when the user never ran one on it."""
    workflow_id = run_workflow_id(thread.user_id, thread.thread_id)
    description = await describe(client, workflow_id)
    if description is not None:
        return ThreadWorkflow(workflow_id, description)
    legacy_id = legacy_run_workflow_id(thread.thread_id)
    legacy = await describe(client, legacy_id)
    if legacy is not None and owner(legacy) == thread.user_id:
        return ThreadWorkflow(legacy_id, legacy)
    return None


def candidate_ids(thread: ThreadRef) -> list[str]:
    """The workflow ids that may hold runs of ``thread``: its own, then the legacy one (whose runs may be anyone's)."""
    return [run_workflow_id(thread.user_id, thread.thread_id), legacy_run_workflow_id(thread.thread_id)]


async def delete(client: Client, objects: ObjectStore, thread: ThreadRef, home: Path) -> DeletedThread:
    """Remove ``thread``: its folder and the payloads of its closed runs, never another user's and never those of
    a run that is open or starts meanwhile.

    Of the runs with payloads under the thread's candidate ids, a delete takes every closed run of its own id (one
    Temporal has forgotten too: nobody else's) and the closed legacy runs that are this user's; a legacy run that
    Temporal has forgotten keeps its payloads, whose they were is unknown. An open run refuses the delete
    (:class:`ThreadBusyError`). A run that starts after the listing is not in it. The start inputs of the own id
    (the SDK stores them before a run id exists, under ``ri/null``, shared by its runs) go last, and only while
    Temporal shows no open run of the id: a start racing the delete keeps its input unless its store and its
    start straddle that last look, a window of one storage call. Legacy start inputs are every user's: kept. Messages
    waiting in the thread's queue (``workers/client/queue.py``) refuse it too: the queue would start a run on it.
    """
    own = run_workflow_id(thread.user_id, thread.thread_id)
    if await ThreadQueue(client).is_open(thread):
        # Its next message would start a run on the deleted thread (and write it again): the caller cancels it.
        raise ThreadBusyError(f"thread {thread.thread_id} has queued messages: cancel its pending runs first")
    stored = await asyncio.to_thread(stored_runs, objects, candidate_ids(thread))
    runs = []
    for run in stored:
        if run.run_id == START_INPUTS:
            continue
        description = await describe(client, run.workflow_id, run.run_id)
        if run.workflow_id != own and (description is None or owner(description) != thread.user_id):
            continue  # another user's legacy run, or one whose user is unknown
        if description is not None and description.status == WorkflowExecutionStatus.RUNNING:
            raise ThreadBusyError(f"thread {thread.thread_id} has an active run ({run.run_id}): cancel it first")
        runs.append(run)
    deleted = await asyncio.to_thread(delete_thread, objects, thread, home, runs)
    inputs = [run for run in stored if run.run_id == START_INPUTS and run.workflow_id == own]
    newest = await describe(client, own) if inputs else None
    if inputs and (newest is None or newest.status != WorkflowExecutionStatus.RUNNING):
        for run in inputs:
            deleted.prefixes[run.prefix] = await asyncio.to_thread(objects.delete_prefix, run.prefix)
    return deleted
