"""``memory.enqueue``: put a run's conversation on its user's memory queue, the memory workflow.

Signal-with-start: the signal reaches the user's running memory workflow, or starts it first (on this worker's
task queue). Temporal keeps one workflow per id, so every worker and every run of a user share one queue. The
workflow drops a signal it has already seen, so a retried enqueue is harmless.
"""

from __future__ import annotations

from temporalio import activity

from activities.contract import implements
from vocabulary.contracts import (
    MEMORY_ENQUEUE,
    MEMORY_ENQUEUE_SIGNAL,
    MEMORY_WORKFLOW,
    MEMORY_WORKFLOW_ID_PREFIX,
    MemoryEnqueueInput,
    MemoryWorkflowInput,
)


class MemoryQueueActivities:
    @implements(MEMORY_ENQUEUE)
    async def enqueue(self, input: MemoryEnqueueInput) -> None:
        await activity.client().start_workflow(
            MEMORY_WORKFLOW,
            MemoryWorkflowInput(user_id=input.user_id),
            id=f"{MEMORY_WORKFLOW_ID_PREFIX}{input.user_id}",
            task_queue=activity.info().task_queue,
            start_signal=MEMORY_ENQUEUE_SIGNAL,
            start_signal_args=[input.item],
            static_summary=f"memory queue of user {input.user_id}",
        )
