"""Edits of a thread's state outside a run, each a new committed version (``workers/api/checkpoints.py``):

* ``POST /threads/{id}/state`` (LangGraph's ``update_state``; DeerFlow's rename sends ``{values: {title}}``):
  the values merged into the newest version (or ``checkpoint_id``'s, a fork by update) through the state's
  reducers. Only :data:`WRITABLE` channels; an unknown or unwritable key, or a value of the wrong type, is 422 with
  nothing written; 409 while a run is active or paused (its commit would conflict) or when a run committed
  meanwhile.
* ``POST /threads/{id}/copy`` (LangGraph's ``threads.copy``): a new thread whose first version is the newest
  state of this one; ``POST /threads/{id}/branches`` (DeerFlow's "branch from this turn"): a new thread from the
  version in which an answer first appears. A fork's record names its origin (``lineage.forked_from``, and
  DeerFlow's ``branch_parent_*`` metadata for a branch); the sandbox binding is not copied (it belongs to the
  source thread's sandbox), nor are uploaded or generated files.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import Field, ValidationError

from activities.thread_store import ThreadConflictError
from vocabulary.contracts import CommitLineage, ThreadRef
from vocabulary.state import CHANNELS, ThreadState, apply_update
from workers.api import checkpoints, records
from workers.api.deps import ApiContext, Context, Thread, thread_ref
from workers.api.limits import ApiBody
from workers.api.threads import thread_view

router = APIRouter()
WRITABLE = frozenset({"title", "messages", "todos", "goal", "artifacts"})
"""What a client may set: what DeerFlow's app and LangGraph clients edit. The sandbox binding, the run's
bookkeeping (delegations, skills, summaries) and upload lists are the runs' own."""
NOT_FORKED = ("sandbox", "thread_data")
"""Bound to the source thread (its sandbox, its folders): a fork starts without them, as DeerFlow's branches do."""


class StateUpdate(ApiBody):
    values: dict[str, Any] | None = None
    as_node: str | None = None
    checkpoint: dict[str, Any] | None = None
    checkpoint_id: str | None = None


class BranchRequest(ApiBody):
    """DeerFlow's ``branchThreadFromTurn`` body (``frontend/src/core/threads/api.ts``)."""

    message_id: str = Field(min_length=1)
    message_ids: list[str] = Field(default_factory=list)
    title: str | None = Field(None, max_length=256)


def merged(base: dict[str, Any], values: dict[str, Any]) -> ThreadState:
    """``values`` folded into ``base`` through the reducers; 422 for a key or a value the state does not take."""
    unknown = sorted(set(values) - CHANNELS)
    if unknown:
        raise HTTPException(422, f"unknown thread-state field(s): {', '.join(unknown)}")
    refused = sorted(set(values) - WRITABLE)
    if refused:
        raise HTTPException(422, f"thread-state field(s) not writable: {', '.join(refused)}")
    try:
        typed = ThreadState.model_validate(values)
        update = {key: getattr(typed, key) for key in values}
        return apply_update(ThreadState.model_validate(base), update, new_id=lambda: str(uuid.uuid4()))
    except (ValidationError, ValueError) as exc:
        raise HTTPException(422, f"values: {str(exc).splitlines()[0]}") from None


async def require_idle(context: ApiContext, thread: ThreadRef) -> None:
    current = await context.ledger.chain(thread)
    if current.active:
        raise HTTPException(
            409, f"thread {thread.thread_id} has a run {current.status}: change its state after it ends"
        )


async def commit(context: ApiContext, thread: ThreadRef, state: ThreadState, expected: int, line: CommitLineage) -> int:
    try:
        return await context.ledger.commit(thread, state, expected, f"api-{line.source}-{uuid.uuid4()}", line)
    except ThreadConflictError as exc:
        raise HTTPException(409, str(exc)) from None


@router.post("/threads/{thread_id}/state")
async def update_state(body: StateUpdate, thread: Thread, context: Context) -> dict[str, Any]:
    await context.ledger.require_thread(thread)
    named = checkpoints.requested_id(body.checkpoint, body.checkpoint_id)
    _, newest, _ = await context.ledger.committed(thread)
    base = checkpoints.CheckpointRef(newest) if named is None else checkpoints.parse(named)
    found = None if base is None else await checkpoints.load(context.ledger, thread, base)
    if base is None or base.input or (found is None and named is not None):
        raise HTTPException(404, f"checkpoint {named!r} of thread {thread.thread_id} is not a kept version")
    state = merged(found.values if found is not None else {}, body.values or {})
    await require_idle(context, thread)
    version = await commit(context, thread, state, newest, CommitLineage(base.version, source="update"))
    return {"checkpoint": checkpoints.config(thread, checkpoints.CheckpointRef(version))}


async def fork_thread(
    context: ApiContext, source: ThreadRef, found: checkpoints.Checkpoint, metadata: dict[str, Any]
) -> ThreadRef:
    """A new thread of the same user whose first version is ``found``'s state."""
    thread = thread_ref(source.user_id, str(uuid.uuid4()))
    values = {key: value for key, value in found.values.items() if key not in NOT_FORKED}
    origin = {"thread_id": source.thread_id, "checkpoint_id": found.ref.id}
    line = CommitLineage(0, source="fork", forked_from=origin)
    await commit(context, thread, ThreadState.model_validate(values), 0, line)
    await context.ledger.save_thread(thread, records.new_thread_record(thread, metadata))
    return thread


@router.post("/threads/{thread_id}/copy")
async def copy_thread(thread: Thread, context: Context) -> dict[str, Any]:
    record = await context.ledger.require_thread(thread)
    _, newest, _ = await context.ledger.committed(thread)
    found = await checkpoints.load(context.ledger, thread, checkpoints.CheckpointRef(newest))
    if found is None:
        found = checkpoints.Checkpoint(
            checkpoints.CheckpointRef(0), dict(checkpoints.EMPTY_VALUES), None, None, "input"
        )
    copy = await fork_thread(context, thread, found, dict(record["metadata"]))
    return await thread_view(context, copy, await context.ledger.require_thread(copy))


@router.post("/threads/{thread_id}/branches")
async def branch_thread(body: BranchRequest, thread: Thread, context: Context) -> dict[str, Any]:
    """DeerFlow's branch: the version in which the turn's answer first appears, as a new thread."""
    await context.ledger.require_thread(thread)
    wanted = {body.message_id, *body.message_ids}
    found = None
    for version in sorted(await context.ledger.versions(thread)):
        record = await context.ledger.version(thread, version)
        if record is not None and any(m.get("id") in wanted for m in record["state"].get("messages") or []):
            found = checkpoints.committed_checkpoint(record)
            break
    if found is None:
        raise HTTPException(404, f"message {body.message_id!r} is in no kept version of thread {thread.thread_id}")
    metadata = {
        "deerflow_branch": True,
        "branch_parent_thread_id": thread.thread_id,
        "branch_parent_checkpoint_id": found.ref.id,
        "branch_parent_message_id": body.message_id,
        "branch_created_at": records.now(),
    }
    if body.title:
        found.values = {**found.values, "title": body.title}
    branch = await fork_thread(context, thread, found, metadata)
    return {
        "thread_id": branch.thread_id,
        "parent_thread_id": thread.thread_id,
        "parent_checkpoint_id": found.ref.id,
        "branched_from_message_id": body.message_id,
        "workspace_clone_mode": "skipped",
        "history_seed_mode": "seeded",  # its history is its state (the copied version)
    }
