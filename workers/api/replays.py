"""DeerFlow's regenerate and edit-and-rerun: ``POST /threads/{id}/runs/regenerate/prepare`` (``{message_id}``, the
answer to regenerate) and ``POST /threads/{id}/runs/edit-regenerate/prepare`` (``{human_message_id,
replacement_text}``), as DeerFlow's app calls them (``frontend/src/core/threads/hooks.ts``: ``regenerateMessage``,
``editAndRegenerateMessage``). Nothing is written: each answers the ``input``, ``checkpoint`` and ``metadata`` the
app then sends to ``runs/stream``, where the checkpoint forks the thread (``workers/api/forks.py``).

The checkpoint is the version the turn's run started from (its lineage's parent); the input is the turn's human
message (regenerate: the same, with its id, so the new answer is a sibling of the old under one input checkpoint)
or the edited one (a new id, the message's files kept). The latest title comes along when the base predates it
(DeerFlow keeps a rename across the rollback). As in DeerFlow, only the latest turn: another is 409, as is an
answer still running or one that is not the assistant's text.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import Field

from vocabulary.contracts import ThreadRef
from workers.api import checkpoints, forks
from workers.api.deps import ApiContext, Context, Thread
from workers.api.limits import ApiBody

router = APIRouter()


class RegeneratePrepare(ApiBody):
    message_id: str = Field(min_length=1)


class EditRegeneratePrepare(ApiBody):
    human_message_id: str = Field(min_length=1)
    replacement_text: str = Field(min_length=1)


def _visible(message: dict[str, Any], kind: str) -> bool:
    hidden = (message.get("additional_kwargs") or {}).get("hide_from_ui") is True or message.get("name") == "summary"
    return message.get("type") == kind and not hidden


def _text(message: dict[str, Any]) -> str:
    return forks.message_text({**message, "additional_kwargs": {}}).strip()


async def _head(context: ApiContext, thread: ThreadRef) -> dict[str, Any]:
    await context.ledger.require_thread(thread)
    if (await context.ledger.chain(thread)).active:
        raise HTTPException(409, f"thread {thread.thread_id} has a run in flight: rerun a turn after it ends")
    _, newest, _ = await context.ledger.committed(thread)
    record = await context.ledger.version(thread, newest) if newest else None
    if record is None:
        raise HTTPException(404, f"thread {thread.thread_id} has no checkpoint")
    return record


async def _turn(context: ApiContext, thread: ThreadRef, head: dict[str, Any], human: dict[str, Any]) -> dict[str, Any]:
    """The version whose run started with ``human``, walking the head's ancestry."""
    wanted = forks.message_id(human)
    record: dict[str, Any] | None = head
    while record is not None:
        line = checkpoints.lineage(record)
        if wanted and line.get("message_id") == wanted:
            return record
        parent = int(line["parent"])
        record = await context.ledger.version(thread, parent) if parent > 0 else None
    raise HTTPException(409, "the checkpoint this turn started from is not kept: it cannot be rerun")


async def _target_run(context: ApiContext, thread: ThreadRef, turn: dict[str, Any]) -> str:
    """The API run that committed ``turn`` (its chain's last segment), else the chain's id."""
    chain = str((turn.get("commit") or {}).get("run_id") or "")
    current = await context.ledger.chain(thread)
    found = [r for r in await context.ledger.runs(thread, current) if r.workflow_run_id == chain]
    return found[0].run_id if found else chain


def _prepared(
    thread: ThreadRef, turn: dict[str, Any], head: dict[str, Any], message: dict[str, Any], run_id: str
) -> dict[str, Any]:
    base = checkpoints.CheckpointRef(int(checkpoints.lineage(turn)["parent"]))
    checkpoint = {k: v for k, v in checkpoints.config(thread, base).items() if k != "thread_id"}
    title = head["state"].get("title")
    return {
        "input": {"messages": [message], **({"title": title} if title else {})},
        "checkpoint": checkpoint,
        "metadata": {"regenerate_from_run_id": run_id, "regenerate_checkpoint_id": base.id},
        "target_run_id": run_id,
    }


@router.post("/threads/{thread_id}/runs/regenerate/prepare")
async def prepare_regenerate(body: RegeneratePrepare, thread: Thread, context: Context) -> dict[str, Any]:
    head = await _head(context, thread)
    messages = head["state"].get("messages") or []
    index = next((i for i, m in enumerate(messages) if m.get("id") == body.message_id), None)
    if index is None:
        raise HTTPException(404, f"message {body.message_id} not found")
    if not _visible(messages[index], "ai"):
        raise HTTPException(409, "only visible assistant messages can be regenerated")
    if next(m for m in reversed(messages) if _visible(m, "ai"))["id"] != body.message_id:
        raise HTTPException(409, "only the latest assistant message can be regenerated")
    human = next((m for m in reversed(messages[:index]) if _visible(m, "human")), None)
    if human is None:
        raise HTTPException(409, "could not find the user message for this assistant response")
    turn = await _turn(context, thread, head, human)
    kwargs = {k: v for k, v in (human.get("additional_kwargs") or {}).items() if k != "original_user_content"}
    kwargs.pop("hide_from_ui", None)
    message = {
        "type": "human",
        "id": forks.message_id(human),
        "content": [{"type": "text", "text": forks.message_text(human)}],
        "additional_kwargs": kwargs,
    }
    prepared = _prepared(thread, turn, head, message, await _target_run(context, thread, turn))
    prepared["metadata"]["regenerate_from_message_id"] = body.message_id
    return prepared


@router.post("/threads/{thread_id}/runs/edit-regenerate/prepare")
async def prepare_edit(body: EditRegeneratePrepare, thread: Thread, context: Context) -> dict[str, Any]:
    text = body.replacement_text.strip()
    if not text:
        raise HTTPException(409, "the edited message cannot be empty")
    head = await _head(context, thread)
    messages = head["state"].get("messages") or []
    humans = [i for i, m in enumerate(messages) if _visible(m, "human")]
    if not humans or messages[humans[-1]].get("id") != body.human_message_id:
        raise HTTPException(409, "only the latest completed user turn can be edited")
    human = messages[humans[-1]]
    answers = [m for m in messages[humans[-1] + 1 :] if _visible(m, "ai")]
    if not answers or not _text(answers[-1]) or answers[-1].get("tool_calls"):
        raise HTTPException(409, "only completed assistant text turns can be edited")
    if text == forks.message_text(human).strip():
        raise HTTPException(409, "the edited message is unchanged")
    turn = await _turn(context, thread, head, human)
    replacement = str(uuid.uuid4())
    kept = {k: v for k, v in (human.get("additional_kwargs") or {}).items() if k in ("files",)}
    message = {
        "type": "human",
        "id": replacement,
        "content": [{"type": "text", "text": text}],
        "additional_kwargs": kept,
    }
    run_id = await _target_run(context, thread, turn)
    prepared = _prepared(thread, turn, head, message, run_id)
    base = await context.ledger.version(thread, int(checkpoints.lineage(turn)["parent"]))
    if not ((base or {}).get("state") or {}).get("title"):
        prepared["input"].pop("title", None)  # DeerFlow: an untitled base keeps no title named after the old prompt
    first, last = humans[-1], messages.index(answers[-1])
    prepared["metadata"].update(
        {
            "replay_kind": "edit",
            "regenerate_from_message_id": answers[-1].get("id"),
            "edit_from_message_id": human.get("id"),
            "edit_message_id": replacement,
            "edit_version_group_id": human.get("id"),
        }
    )
    return {
        **prepared,
        "replacement_human_message_id": replacement,
        "source_message_ids": [m["id"] for m in messages[first : last + 1] if m.get("id")],
    }
