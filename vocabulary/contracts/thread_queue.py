"""A thread's queue of messages waiting for its run (``multitask_strategy: enqueue``): the activity the queue
workflow (``workflows/thread_queue.py``) waits with, implemented in ``activities/thread_queue.py``."""

from __future__ import annotations

from dataclasses import dataclass

from vocabulary.activity_ref import ActivityRef


@dataclass
class RunClosedInput:
    workflow_id: str
    """The thread's run workflow id (``vocabulary/workflow_ids.run_workflow_id``): its newest chain is awaited."""


@dataclass
class RunClosed:
    status: str
    """How the chain ended (Temporal's execution status, lower case); ``none``: the id never ran."""


THREAD_RUN_CLOSED = ActivityRef("thread.run_closed", RunClosedInput, RunClosed)
"""Returns once the thread's newest run chain has closed (completed, failed, cancelled, terminated), following
continue-as-new; heartbeats while it waits, so a worker that dies hands the wait to another."""
