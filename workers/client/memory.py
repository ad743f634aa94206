"""A user's change to their memory, sent to their memory workflow (``workflows/memory.py``) as its ``edit`` update.

The memory workflow is the memory's only writer, so the API and the CLI never save the document themselves: they
send the edit with update-with-start (a user who never ran anything has no memory workflow yet; Temporal keeps one
per id, so the edit joins the running one or starts it) and get the saved document back. Reading needs no
workflow: the document is replaced atomically (``activities/memory_store.py``). :class:`MemoryModel` is what an
import must be, :func:`memory_view` what a reader is shown (DeerFlow's ``frontend/src/core/memory/types.ts``).
"""

from __future__ import annotations

import asyncio
import math
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy

from vocabulary.causes import root_message, root_type
from vocabulary.contracts import MEMORY_WORKFLOW, MEMORY_WORKFLOW_ID_PREFIX, MemoryWorkflowInput
from vocabulary.contracts.memory import MEMORY_EDIT_UPDATE, MemoryDocument, MemoryEdit

MAX_FACTS = 10_000
MAX_TEXT = 20_000
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


class Section(BaseModel):
    summary: str = Field(default="", max_length=MAX_TEXT)
    updatedAt: str = ""


class UserSections(BaseModel):
    workContext: Section = Field(default_factory=Section)
    personalContext: Section = Field(default_factory=Section)
    topOfMind: Section = Field(default_factory=Section)


class HistorySections(BaseModel):
    recentMonths: Section = Field(default_factory=Section)
    earlierContext: Section = Field(default_factory=Section)
    longTermBackground: Section = Field(default_factory=Section)


class Fact(BaseModel):
    model_config = ConfigDict(extra="allow")  # sourceError and DeerFlow's own fact fields travel along

    id: str = Field(min_length=1, max_length=200)
    content: str = Field(min_length=1, max_length=MAX_TEXT)
    category: str = "context"
    confidence: float = Field(default=0.5, ge=0.0, le=1.0)
    createdAt: str = ""
    source: str = "unknown"

    @field_validator("content")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("fact content cannot be blank")
        return value


class MemoryModel(BaseModel):
    """The document as the frontend reads it, and what an import must be."""

    version: str = "1.0"
    lastUpdated: str = ""
    user: UserSections = Field(default_factory=UserSections)
    history: HistorySections = Field(default_factory=HistorySections)
    facts: list[Fact] = Field(default_factory=list, max_length=MAX_FACTS)

    @model_validator(mode="after")
    def _unique_ids(self) -> MemoryModel:
        ids = [fact.id for fact in self.facts]
        if len(ids) != len(set(ids)):
            raise ValueError("fact ids must be unique")
        return self


def memory_view(document: dict[str, Any]) -> dict[str, Any]:
    """The stored document in the frontend's shape. Tolerant, as DeerFlow's reader: what an extraction or a
    hand-edited file left odd (a confidence over 1, a fact without content) is shown clamped or left out."""

    def sections(group: Any, names: tuple[str, ...]) -> dict[str, Any]:
        found = group if isinstance(group, dict) else {}
        shown = {}
        for name in names:
            found_section = found.get(name)
            section = found_section if isinstance(found_section, dict) else {}
            shown[name] = {
                "summary": str(section.get("summary") or ""),
                "updatedAt": str(section.get("updatedAt") or ""),
            }
        return shown

    facts = []
    for fact in document.get("facts") or []:
        if not isinstance(fact, dict) or not isinstance(fact.get("content"), str) or not fact["content"].strip():
            continue
        facts.append(
            {
                **fact,
                "id": str(fact.get("id") or ""),
                "category": str(fact.get("category") or "context"),
                "confidence": _clamped(fact.get("confidence")),
                "createdAt": str(fact.get("createdAt") or ""),
                "source": str(fact.get("source") or "unknown"),
            }
        )
    return {
        "version": str(document.get("version") or "1.0"),
        "lastUpdated": str(document.get("lastUpdated") or ""),
        "user": sections(document.get("user"), tuple(UserSections.model_fields)),
        "history": sections(document.get("history"), tuple(HistorySections.model_fields)),
        "facts": facts,
    }


def _clamped(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.5
    return min(1.0, max(0.0, number)) if math.isfinite(number) else 0.5


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
