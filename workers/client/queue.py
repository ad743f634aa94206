"""A thread's queue of messages that wait for its run (``multitask_strategy: enqueue``, ``hartflow run --if-busy
enqueue``): the client side of ``workflows/thread_queue.py``.

A message joins the queue through the queue's validated ``enqueue`` update sent with update-with-start: the queue
workflow is started when none is open, the open one takes it otherwise, and the message is durable once the call
returns. The client's run id names the update, so a retried call queues nothing twice.
"""

from __future__ import annotations

from temporalio.client import Client, WithStartWorkflowOperation, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from vocabulary.contracts import ThreadRef
from vocabulary.workflow_ids import queue_workflow_id, run_workflow_id
from workflows.thread_queue import QueuedRun, QueueInput, ThreadQueueWorkflow

ATTEMPTS = 3
"""Tries of an enqueue that met the open queue as it closed (Temporal: not found); the next try starts a new one."""


class ThreadQueue:
    """The queues of one deployment's threads."""

    def __init__(self, client: Client, task_queue: str | None = None) -> None:
        self.client = client
        self.task_queue = task_queue
        """Where a new queue workflow goes; only :meth:`enqueue` needs it."""

    def _handle(self, thread: ThreadRef) -> WorkflowHandle[ThreadQueueWorkflow, dict[str, str]]:
        return self.client.get_workflow_handle_for(
            ThreadQueueWorkflow.run, queue_workflow_id(run_workflow_id(thread.user_id, thread.thread_id))
        )

    async def enqueue(self, thread: ThreadRef, item: QueuedRun) -> int:
        """Queue ``item`` behind the thread's run and its queued messages; its place (0: next)."""
        if self.task_queue is None:
            raise ValueError("ThreadQueue needs the deployment's task queue (temporal.task_queue) to enqueue")
        runs_id = run_workflow_id(thread.user_id, thread.thread_id)
        for attempt in range(1, ATTEMPTS + 1):
            start = WithStartWorkflowOperation(
                ThreadQueueWorkflow.run,
                QueueInput(runs_id),
                id=queue_workflow_id(runs_id),
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                static_summary=f"queued messages · thread {thread.thread_id}",
            )
            try:
                return await self.client.execute_update_with_start_workflow(
                    ThreadQueueWorkflow.enqueue, item, start_workflow_operation=start, id=f"enqueue-{item.run_id}"
                )
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND or attempt == ATTEMPTS:
                    raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def is_open(self, thread: ThreadRef) -> bool:
        """Messages wait in the thread's queue (its workflow is open)."""
        try:
            description = await self._handle(thread).describe()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            return False
        return description.close_time is None

    async def started(self, thread: ThreadRef) -> dict[str, str]:
        """Which run each message of the thread's newest queue became (run id → its chain's first execution)."""
        handle = self._handle(thread)
        try:
            if await self.is_open(thread):
                return await handle.query(ThreadQueueWorkflow.started)
            return await handle.result()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            return {}

    async def started_as(self, thread: ThreadRef, run_id: str) -> str:
        """Once the queued run ``run_id`` has started: its chain's first execution (``""``: not queued, withdrawn)."""
        if await self.is_open(thread):
            try:
                return await self._handle(thread).execute_update(ThreadQueueWorkflow.started_as, run_id)
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise  # closed meanwhile: its result says
        return (await self.started(thread)).get(run_id, "")

    async def withdraw(self, thread: ThreadRef, run_id: str) -> str | None:
        """Take the queued run ``run_id`` out: ``""``; its chain's first execution when it started already;
        ``None`` when no queue is open."""
        if not await self.is_open(thread):
            return None
        try:
            return await self._handle(thread).execute_update(ThreadQueueWorkflow.withdraw, run_id)
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            return None
