"""Settings → Memory: the caller's long-term memory in the shape DeerFlow's frontend reads
(``frontend/src/core/memory/api.ts``, ``types.ts``; DeerFlow's handlers: ``backend/app/gateway/routers/memory.py``).

- ``GET /memory``, ``GET /memory/export``, ``POST /memory/reload`` → the document ``{version, lastUpdated,
  user: {workContext, personalContext, topOfMind: {summary, updatedAt}}, history: {recentMonths, earlierContext,
  longTermBackground}, facts: [{id, content, category, confidence, createdAt, source}]}``;
- ``POST /memory/facts`` ``{content, category?, confidence?}``, ``PATCH /memory/facts/{id}`` (the fields given),
  ``DELETE /memory/facts/{id}``, ``DELETE /memory`` (clear), ``POST /memory/import`` (a whole document) → the
  saved document.

Every change goes to the caller's memory workflow as an edit (``workers/client/memory.py``), which also runs the
extractions after runs, so an edit is never lost to a concurrent extraction. A body is checked before it is
sent (422, nothing written); an unknown fact is 404, a fact whose content another fact has already is 409. The
memory is the caller's own (``users/{user}/memory.json``): nobody reads or changes another user's.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field

from activities.memory_store import MemoryStoreError, load_memory
from vocabulary.contracts.memory import MemoryEdit
from workers.api.deps import Context, User
from workers.client.memory import (
    MAX_TEXT,
    MemoryEditRefused,
    MemoryEditUnanswered,
    MemoryModel,
    edit_memory,
    memory_view,
)
from workflows.memory_edit import DUPLICATE, INVALID, NOT_FOUND

router = APIRouter()

FactId = Annotated[str, PathParam(min_length=1, max_length=200)]
_STATUS = {NOT_FOUND: 404, DUPLICATE: 409, INVALID: 422, "MemoryStoreError": 500}


class FactCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str = Field(min_length=1, max_length=MAX_TEXT)
    category: str = Field(default="context", max_length=100)
    confidence: float = Field(default=0.5, ge=0.0, le=1.0)


class FactPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str | None = Field(default=None, min_length=1, max_length=MAX_TEXT)
    category: str | None = Field(default=None, max_length=100)
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)


async def _read(context: Context, user: str) -> dict[str, Any]:
    try:
        document = await asyncio.to_thread(load_memory, context.objects, user)
    except MemoryStoreError as exc:
        raise HTTPException(500, str(exc)) from None
    return memory_view(document)


async def _edit(context: Context, user: str, edit: MemoryEdit) -> dict[str, Any]:
    try:
        saved = await edit_memory(context.client, context.config.temporal.task_queue, user, edit)
    except MemoryEditRefused as exc:
        raise HTTPException(_STATUS.get(exc.kind or "", 503), str(exc)) from None
    except MemoryEditUnanswered as exc:
        raise HTTPException(503, str(exc), headers={"Retry-After": "5"}) from None
    return memory_view(saved)


@router.get("/memory")
async def get_memory(context: Context, user: User) -> dict[str, Any]:
    return await _read(context, user)


@router.get("/memory/export")
async def export_memory(context: Context, user: User) -> dict[str, Any]:
    return await _read(context, user)


@router.post("/memory/reload")
async def reload_memory(context: Context, user: User) -> dict[str, Any]:
    """DeerFlow's cache refresh: hartflow keeps no cache, so this is the stored document."""
    return await _read(context, user)


@router.delete("/memory")
async def clear_memory(context: Context, user: User) -> dict[str, Any]:
    return await _edit(context, user, MemoryEdit("clear"))


@router.post("/memory/facts")
async def create_fact(body: FactCreate, context: Context, user: User) -> dict[str, Any]:
    edit = MemoryEdit("create_fact", content=body.content, category=body.category, confidence=body.confidence)
    return await _edit(context, user, edit)


@router.patch("/memory/facts/{fact_id}")
async def update_fact(fact_id: FactId, body: FactPatch, context: Context, user: User) -> dict[str, Any]:
    edit = MemoryEdit(
        "update_fact",
        fact_id=fact_id,
        content=body.content,
        category=body.category,
        confidence=body.confidence,
    )
    return await _edit(context, user, edit)


@router.delete("/memory/facts/{fact_id}")
async def delete_fact(fact_id: FactId, context: Context, user: User) -> dict[str, Any]:
    return await _edit(context, user, MemoryEdit("delete_fact", fact_id=fact_id))


@router.post("/memory/import")
async def import_memory(body: MemoryModel, context: Context, user: User) -> dict[str, Any]:
    return await _edit(context, user, MemoryEdit("import", document=body.model_dump(mode="json")))
