"""A user's change to their memory, sent to their memory workflow (``workflows/memory.py``) as its ``edit`` update.

The memory workflow is the memory's only writer, so the API and the CLI never save the document themselves: they
send the edit with update-with-start (a user who never ran anything has no memory workflow yet; Temporal keeps one
per id, so the edit joins the running one or starts it) and get the saved document back. Reading needs no
workflow: the document is replaced atomically (``activities/memory_store.py``).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WithStartWorkflowOperation, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy

from vocabulary.causes import root_message, root_type
from vocabulary.contracts import MEMORY_WORKFLOW, MEMORY_WORKFLOW_ID_PREFIX, MemoryWorkflowInput
from vocabulary.contracts.memory import MEMORY_EDIT_UPDATE, MemoryDocument, MemoryEdit

EDIT_TIMEOUT = timedelta(seconds=90)
"""Longer than the workflow's own patience with storage (60 s): past it, no worker is taking the edit."""


class MemoryEditRefused(Exception):
    """The workflow refused or failed the edit; ``kind`` is its error type (``workflows/memory_edit.py``'s kinds,
    ``MemoryStoreError`` for a stored document that is not one, ``None`` for storage that stayed away)."""

    def __init__(self, kind: str | None, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class MemoryEditUnanswered(Exception):
    """No worker answered within :data:`EDIT_TIMEOUT`; the edit may still be applied when one picks it up."""


def memory_workflow_id(user_id: str) -> str:
    return f"{MEMORY_WORKFLOW_ID_PREFIX}{user_id}"


async def edit_memory(client: Client, task_queue: str, user_id: str, edit: MemoryEdit) -> dict[str, Any]:
    """Apply ``edit`` to ``user_id``'s memory through their memory workflow; the saved document."""
    start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
        MEMORY_WORKFLOW,
        MemoryWorkflowInput(user_id=user_id),
        id=memory_workflow_id(user_id),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary=f"memory queue of user {user_id}",
    )
    try:
        async with asyncio.timeout(EDIT_TIMEOUT.total_seconds()):
            document = await client.execute_update_with_start_workflow(
                MEMORY_EDIT_UPDATE, edit, start_workflow_operation=start, result_type=MemoryDocument
            )
    except WorkflowUpdateFailedError as exc:
        raise MemoryEditRefused(root_type(exc), root_message(exc)) from None
    except TimeoutError:
        raise MemoryEditUnanswered(
            f"no worker applied the memory edit within {EDIT_TIMEOUT.total_seconds():.0f} s (is one running?)"
        ) from None
    assert isinstance(document, MemoryDocument)
    return document.data
