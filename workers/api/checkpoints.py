"""A thread's committed versions served as LangGraph checkpoints, linked into a tree so clients can branch.

Checkpoint ids:

* ``v{N}``: committed version N (``activities/thread_store.py``); ``v0``: the empty state before the thread's first
  commit, the root every branch grows from.
* ``v{N}-input``: the input of the run that committed N: the state it started from (its parent version) plus that
  run's human message. A run commits once, so this stands for the checkpoints LangGraph writes between a run's
  input and its end: the message that *first appears* in ``v{N}-input`` (the human one) has ``v{parent}`` as its
  parent checkpoint, and the messages first appearing in ``v{N}`` (the answer) have ``v{N}-input``. That is what
  Agent Chat UI sends back (``src/components/thread/messages/{human,ai}.tsx``: the parent checkpoint of the
  message's first-seen state): *edit* a human message → a new message from ``v{parent}`` (a fork), *regenerate*
  an answer → no input from ``v{N}-input`` (the same human message rerun from ``v{parent}``).

A version's parent is ``v{N}-input`` when its run recorded its message (a regenerate's is the input it reran,
so the two answers are siblings), else ``v{parent}`` (a run's later commits, a state update, a version written
before lineage was recorded: ``v{N-1}``). History lists checkpoints newest first, each input just below its own
version, so a client's "oldest state holding this message" is the one described above.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException

from vocabulary.contracts import ThreadRef
from workers.api.ledger import Ledger
from workers.api.limits import version_number
from workers.api.served import served_values

INPUT_SUFFIX = "-input"
EMPTY_VALUES: dict[str, Any] = {"messages": []}


@dataclass(frozen=True)
class CheckpointRef:
    version: int
    input: bool = False
    """The input checkpoint of ``version`` (its parent's state plus its run's human message)."""

    @property
    def id(self) -> str:
        return f"v{self.version}{INPUT_SUFFIX if self.input else ''}"


@dataclass
class Checkpoint:
    ref: CheckpointRef
    values: dict[str, Any]
    parent: CheckpointRef | None
    created_at: str | None
    source: str
    """LangGraph's checkpoint ``source``: ``input``, ``loop`` (a run), ``update``, ``fork``."""


def parse(checkpoint_id: str) -> CheckpointRef | None:
    """The checkpoint an id names (``v{N}`` or ``v{N}-input``), or ``None`` for anything else."""
    is_input = checkpoint_id.endswith(INPUT_SUFFIX)
    version = version_number(checkpoint_id.removesuffix(INPUT_SUFFIX) if is_input else checkpoint_id)
    if version is None or (is_input and version == 0):
        return None
    return CheckpointRef(version, is_input)


def requested_id(checkpoint: dict[str, Any] | None, checkpoint_id: str | None) -> str | None:
    """The checkpoint id a request names: ``checkpoint_id``, or ``checkpoint.checkpoint_id`` (the JS SDK's way)."""
    if checkpoint_id is not None:
        return checkpoint_id
    named = (checkpoint or {}).get("checkpoint_id")
    if named is not None and not isinstance(named, str):
        raise HTTPException(422, "checkpoint.checkpoint_id must be text")
    return named


def lineage(record: dict[str, Any]) -> dict[str, Any]:
    """The record's lineage; a version committed before lineage was recorded grew from the one before it."""
    found = record.get("lineage")
    return dict(found) if isinstance(found, dict) else {"parent": max(int(record["version"]) - 1, 0)}


def input_of(record: dict[str, Any]) -> CheckpointRef | None:
    """The input checkpoint that is the version's parent, when its run recorded its message."""
    line = lineage(record)
    if not line.get("message_id"):
        return None
    return CheckpointRef(int(line.get("input_of") or record["version"]), input=True)


def input_messages(values: dict[str, Any], message_id: str) -> list[dict[str, Any]]:
    """The messages a run's human message ``message_id`` became: itself, or after DynamicContext's ID swap
    (``middlewares/dynamic_context.py``) the hidden reminder under its id and its ``__memory`` / ``__user`` copies."""
    return [
        m
        for m in values.get("messages") or []
        if isinstance(m, dict) and m.get("id") in (message_id, f"{message_id}__memory", f"{message_id}__user")
    ]


def human_input(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The user's own message among a run's input messages (its ``__user`` copy after an ID swap)."""
    humans = [m for m in messages if m.get("type") == "human" and not str(m.get("id")).endswith("__memory")]
    return next((m for m in humans if str(m.get("id")).endswith("__user")), humans[0] if humans else None)


def committed_checkpoint(record: dict[str, Any]) -> Checkpoint:
    line = lineage(record)
    version = int(record["version"])
    parent = input_of(record) or (CheckpointRef(int(line["parent"])) if version > 0 else None)
    source = str(line.get("source", "loop"))
    return Checkpoint(CheckpointRef(version), record["state"], parent, record.get("committed_at"), source)


async def load(ledger: Ledger, thread: ThreadRef, ref: CheckpointRef) -> Checkpoint | None:
    """The checkpoint ``ref`` names, or ``None`` when the thread does not keep it."""
    if ref.version == 0:
        return Checkpoint(ref, dict(EMPTY_VALUES), None, None, "input") if await ledger.versions(thread) else None
    record = await ledger.version(thread, ref.version)
    if record is None:
        return None
    if not ref.input:
        return committed_checkpoint(record)
    line = lineage(record)
    added = input_messages(record["state"], str(line.get("message_id") or ""))
    if not added or line.get("input_of"):
        return None  # no input of its own: a regenerate reran another version's
    parent = CheckpointRef(int(line["parent"]))
    base = await load(ledger, thread, parent)
    if base is None:
        return None  # its parent was pruned
    ids = {m["id"] for m in added}
    kept = [m for m in base.values.get("messages") or [] if m.get("id") not in ids]
    values = {**base.values, "messages": [*kept, *added]}
    return Checkpoint(ref, values, parent, record.get("committed_at"), "input")


async def history(ledger: Ledger, thread: ThreadRef, limit: int) -> list[Checkpoint]:
    """Up to ``limit`` checkpoints, newest first: each version, then its own input, and finally ``v0``."""
    found: list[Checkpoint] = []
    for version in sorted(await ledger.versions(thread), reverse=True):
        record = await ledger.version(thread, version)
        if record is None:
            continue  # pruned between the listing and the read
        found.append(committed_checkpoint(record))
        own_input = input_of(record)
        if own_input is not None and own_input.version == version and len(found) < limit:
            loaded = await load(ledger, thread, own_input)
            found.extend([loaded] if loaded is not None else [])
        if len(found) >= limit:
            return found[:limit]
    if found:
        found.append(Checkpoint(CheckpointRef(0), dict(EMPTY_VALUES), None, None, "input"))
    return found[:limit]


def view(thread: ThreadRef, checkpoint: Checkpoint, pending: list[dict[str, Any]]) -> dict[str, Any]:
    """The LangGraph ``ThreadState`` of a checkpoint (``pending``: the clarification it waits on, newest only)."""
    tasks = [
        {
            "id": item["id"],
            "name": "ask_clarification",
            "path": [],
            "error": None,
            "interrupts": [item],
            "checkpoint": None,
            "state": None,
            "result": None,
        }
        for item in pending
    ]
    return {
        "values": served_values(checkpoint.values),
        "next": ["ask_clarification"] if pending else [],
        "tasks": tasks,
        "interrupts": pending,
        "checkpoint": config(thread, checkpoint.ref),
        "parent_checkpoint": None if checkpoint.parent is None else config(thread, checkpoint.parent),
        "metadata": {"source": checkpoint.source, "step": checkpoint.ref.version, "version": checkpoint.ref.version},
        "created_at": checkpoint.created_at,
    }


def config(thread: ThreadRef, ref: CheckpointRef) -> dict[str, Any]:
    return {"thread_id": thread.thread_id, "checkpoint_ns": "", "checkpoint_id": ref.id, "checkpoint_map": None}
