"""A thread's queue: messages sent with ``multitask_strategy: enqueue`` while its run is going, started one by one,
in the order they came, each once, when the run before them has closed.

One queue workflow per thread with anything queued, id ``{run workflow id}.queue`` (``vocabulary/workflow_ids.py``).
Clients add to it with update-with-start (``workers/client/queue.py``): the ``enqueue`` update starts the queue when
none is open and joins the open one otherwise, and the message is accepted once the update is (its history holds
it), so neither an API server nor a worker dying loses it. The loop:

    thread.run_closed (activity)   wait until the thread's newest run chain has closed (whoever started it)
    start the head as a child      same id, input, memo, summary and search attributes as ``Runs.start``
                                   (``workers/client/runs.py``); abandoned, so the run outlives the queue; refused
                                   while another run holds the id (a client started one meanwhile): wait again

A run that pauses for input is still going: the queue waits until it ends (its pause is answered the usual way).
The queue closes once nothing waits, returning which run each of its messages became (``started``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from vocabulary.contracts.thread_queue import THREAD_RUN_CLOSED, RunClosedInput
from vocabulary.workflow_ids import run_workflow_id
from workflows import search_attributes as sa
from workflows.run import RunInput, RunWorkflow

THREAD_QUEUE_WORKFLOW = "HartflowThreadQueue"
FIRST_MESSAGE_WAIT = timedelta(minutes=1)
"""A queue is started by its first message's update; one whose update was refused has nothing to do."""
RUN_WAIT = timedelta(days=365)
"""A run may wait days for an answer; the heartbeat, not this, notices a dead worker."""


@dataclass
class QueuedRun:
    """One queued message, ready to start as a run: what ``Runs.start`` would send (``workers/client/runs.py``)."""

    run_id: str
    """The client's id for the run (the Agent Server's API run): the queue starts it once."""
    input: RunInput
    memo: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    details: str = ""


@dataclass
class QueueInput:
    run_workflow_id: str
    """The thread's run workflow id: what the queue waits on and starts its runs under."""


@workflow.defn(name=THREAD_QUEUE_WORKFLOW)
class ThreadQueueWorkflow:
    @workflow.init
    def __init__(self, queue: QueueInput) -> None:
        self._run_workflow_id = queue.run_workflow_id
        self._waiting: list[QueuedRun] = []
        self._started: dict[str, str] = {}
        """API run id → the first execution of the run chain it started as."""

    @workflow.run
    async def run(self, queue: QueueInput) -> dict[str, str]:
        try:
            await workflow.wait_condition(lambda: bool(self._waiting), timeout=FIRST_MESSAGE_WAIT)
        except TimeoutError:
            return self._started
        while self._waiting:
            workflow.set_current_details(f"**Waiting:** {len(self._waiting)} message(s) for {self._run_workflow_id}")
            await workflow.execute_activity(
                THREAD_RUN_CLOSED.name,
                RunClosedInput(self._run_workflow_id),
                result_type=THREAD_RUN_CLOSED.output,
                summary="wait until the thread's run has closed",
                start_to_close_timeout=RUN_WAIT,
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
            )
            if self._waiting:
                await self._start(self._waiting[0])
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self._started

    async def _start(self, item: QueuedRun) -> None:
        try:
            child = await workflow.start_child_workflow(
                RunWorkflow.run,
                item.input,
                id=self._run_workflow_id,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                memo=item.memo or None,
                search_attributes=sa.run_start(item.input.thread_id, item.input.user_id, item.input.model),
                static_summary=item.summary or None,
                static_details=item.details or None,
            )
        except WorkflowAlreadyStartedError:
            return  # another client started a run meanwhile: the loop waits for that one too
        self._started[item.run_id] = child.first_execution_run_id or ""
        self._waiting = [waiting for waiting in self._waiting if waiting.run_id != item.run_id]

    @workflow.update
    def enqueue(self, item: QueuedRun) -> int:
        """Queue ``item``; its place (0: next). A repeat of a queued or started run is taken as the same one."""
        for place, waiting in enumerate(self._waiting):
            if waiting.run_id == item.run_id:
                return place
        if item.run_id not in self._started:
            self._waiting.append(item)
        return len(self._waiting) - 1

    @enqueue.validator
    def _check_enqueue(self, item: QueuedRun) -> None:
        if not item.run_id:
            raise ValueError("a queued run needs the client's run id")
        if run_workflow_id(item.input.user_id, item.input.thread_id) != self._run_workflow_id:
            raise ValueError("a queued run must be for the queue's own thread")

    @workflow.update
    async def started_as(self, run_id: str) -> str:
        """Once the queued run ``run_id`` has started: its chain's first execution; ``""``: it is not queued here
        (withdrawn, or never)."""
        await workflow.wait_condition(
            lambda: run_id in self._started or all(item.run_id != run_id for item in self._waiting)
        )
        return self._started.get(run_id, "")

    @workflow.update
    def withdraw(self, run_id: str) -> str:
        """Take the queued run ``run_id`` out of the queue (a cancel before it started): ``""``; one that started
        already is not withdrawn: its chain's first execution."""
        self._waiting = [item for item in self._waiting if item.run_id != run_id]
        return self._started.get(run_id, "")

    @workflow.query
    def started(self) -> dict[str, str]:
        return dict(self._started)
