"""Threads: create (``if_exists``), get, patch (metadata), delete (409 while a run is active), search, state and
history (checkpoints: ``workers/api/checkpoints.py``). A thread's ``values`` are its committed state as clients
are served it (``workers/api/served.py``: no internal message); while a run pauses for clarification the state
also names the pending question as the interrupt of an ``ask_clarification`` task."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC
from typing import Any, Literal

from fastapi import APIRouter, HTTPException, Response
from pydantic import Field

from activities.thread_store import ObjectThreadStore
from vocabulary.contracts import ThreadRef
from vocabulary.paths import THREAD_ID_PATTERN
from workers.api import checkpoints, records, status
from workers.api.deps import ApiContext, Context, Thread, User, thread_ref
from workers.api.limits import ApiBody
from workers.api.served import served_values
from workers.client import threads

router = APIRouter()
ThreadStatus = Literal["idle", "busy", "interrupted", "error"]


class ThreadCreate(ApiBody):
    thread_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    if_exists: Literal["raise", "do_nothing"] = "raise"


class ThreadPatch(ApiBody):
    metadata: dict[str, Any] = Field(default_factory=dict)


class ThreadSearch(ApiBody):
    metadata: dict[str, Any] = Field(default_factory=dict)
    ids: list[str] | None = None
    status: ThreadStatus | None = None
    limit: int = Field(10, ge=1, le=1000)
    offset: int = Field(0, ge=0)


class HistoryRequest(ApiBody):
    limit: int = Field(10, ge=1, le=1000)


async def thread_view(context: ApiContext, thread: ThreadRef, record: dict[str, Any]) -> dict[str, Any]:
    values, _, committed_at = await context.ledger.committed(thread)
    current = await context.ledger.chain(thread)
    pending = status.interrupts(current, values)
    return {
        **record,
        "updated_at": max(record["updated_at"], committed_at or ""),
        "status": current.thread_status,
        "values": served_values(values),
        "interrupts": {pending[0]["id"]: pending} if pending else {},
    }


@router.post("/threads")
async def create_thread(body: ThreadCreate, user: User, context: Context) -> dict[str, Any]:
    thread = thread_ref(user, body.thread_id or str(uuid.uuid4()))
    existing = await context.ledger.thread(thread)
    if existing is not None:
        if body.if_exists == "raise":
            raise HTTPException(409, f"thread {thread.thread_id} already exists")
        return await thread_view(context, thread, existing)
    record = records.new_thread_record(thread, body.metadata)
    await context.ledger.save_thread(thread, record)
    return await thread_view(context, thread, record)


@router.get("/threads/{thread_id}")
async def get_thread(thread: Thread, context: Context) -> dict[str, Any]:
    return await thread_view(context, thread, await context.ledger.require_thread(thread))


@router.patch("/threads/{thread_id}")
async def patch_thread(body: ThreadPatch, thread: Thread, context: Context) -> dict[str, Any]:
    record = await context.ledger.require_thread(thread)
    record = {**record, "metadata": {**record["metadata"], **body.metadata}, "updated_at": records.now()}
    await context.ledger.save_thread(thread, record)
    return await thread_view(context, thread, record)


@router.delete("/threads/{thread_id}", status_code=204)
async def remove_thread(thread: Thread, context: Context) -> Response:
    await context.ledger.require_thread(thread)
    if (await context.ledger.chain(thread)).active:
        raise HTTPException(409, f"thread {thread.thread_id} has an active run: cancel it first")
    try:
        await threads.delete(context.client, context.objects, thread, context.config.home)
    except threads.ThreadBusyError as exc:
        raise HTTPException(409, str(exc)) from None
    return Response(status_code=204)


@router.post("/threads/search")
async def search_threads(body: ThreadSearch, user: User, context: Context) -> list[dict[str, Any]]:
    """Filtered and paged on what storage lists cheaply (names, API records, when state was last committed);
    a thread's view (its state, its workflow's status) is built only for the page, and with a ``status``
    filter only until the page is full: the cost follows ``offset + limit``, not the number of threads."""
    candidates = await asyncio.to_thread(_search_candidates, context, user, body)
    wanted = body.offset + body.limit
    if body.status is None:
        candidates = candidates[body.offset : wanted]
    found = []
    for thread in candidates:
        record = await context.ledger.thread(thread)
        if record is None:
            continue  # deleted since it was listed
        view = await thread_view(context, thread, record)
        if body.status is None or view["status"] == body.status:
            found.append(view)
        if len(found) >= wanted:
            break
    return found if body.status is None else found[body.offset : wanted]


def _search_candidates(context: ApiContext, user: str, body: ThreadSearch) -> list[ThreadRef]:
    """The caller's threads that match ``ids`` and ``metadata``, newest first, from listings and API records."""
    ranked: list[tuple[str, ThreadRef]] = []
    for name in context.objects.list_children(f"users/{user}/threads/"):
        if (body.ids is not None and name not in body.ids) or not THREAD_ID_PATTERN.fullmatch(name):
            continue
        thread = thread_ref(user, name)
        record = records.thread_record(context.objects, thread)
        committed = _last_commit(context, thread)
        if record is None and committed is None:
            continue  # uploads before the thread's first run: no thread yet
        metadata = (record or {}).get("metadata") or {}
        if any(metadata.get(key) != value for key, value in body.metadata.items()):
            continue
        ranked.append((max((record or {}).get("updated_at") or "", committed or ""), thread))
    ranked.sort(key=lambda item: item[0], reverse=True)
    return [thread for _, thread in ranked]


def _last_commit(context: ApiContext, thread: ThreadRef) -> str | None:
    """When the thread's state was last committed, from the listing of its state objects (none read)."""
    stamps = [info.modified for info in context.objects.list(f"{ObjectThreadStore.thread_prefix(thread)}state")]
    return max(stamps).astimezone(UTC).isoformat() if stamps else None


@router.get("/threads/{thread_id}/state")
async def get_state(thread: Thread, context: Context) -> dict[str, Any]:
    await context.ledger.require_thread(thread)
    values, version, committed_at = await context.ledger.committed(thread)
    current = await context.ledger.chain(thread)
    record = await context.ledger.version(thread, version) if version else None
    newest = checkpoints.committed_checkpoint(record) if record is not None else None
    if newest is None:  # nothing committed yet (or a thread from before versions were kept apart)
        newest = checkpoints.Checkpoint(checkpoints.CheckpointRef(version), values, None, committed_at, "loop")
    return checkpoints.view(thread, newest, status.interrupts(current, values))


@router.post("/threads/{thread_id}/history")
async def get_history(body: HistoryRequest, thread: Thread, context: Context) -> list[dict[str, Any]]:
    """Checkpoints newest first, inputs and branches included (``workers/api/checkpoints.py``); the pending
    clarification shows on the newest."""
    await context.ledger.require_thread(thread)
    current = await context.ledger.chain(thread)
    found = await checkpoints.history(context.ledger, thread, body.limit)
    return [
        checkpoints.view(thread, item, status.interrupts(current, item.values) if index == 0 else [])
        for index, item in enumerate(found)
    ]


@router.get("/threads/{thread_id}/state/{checkpoint_id}")
async def get_state_at(checkpoint_id: str, thread: Thread, context: Context) -> dict[str, Any]:
    """One kept checkpoint (``v{N}`` or ``v{N}-input``, as history names them); any other id is 404."""
    await context.ledger.require_thread(thread)
    ref = checkpoints.parse(checkpoint_id)
    found = None if ref is None else await checkpoints.load(context.ledger, thread, ref)
    if found is None:
        raise HTTPException(404, f"checkpoint {checkpoint_id!r} of thread {thread.thread_id} is not kept")
    _, newest, _ = await context.ledger.committed(thread)
    current = await context.ledger.chain(thread)
    newest_ref = checkpoints.CheckpointRef(newest)
    pending = status.interrupts(current, found.values) if found.ref == newest_ref else []
    return checkpoints.view(thread, found, pending)
