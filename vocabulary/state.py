"""Thread state: the persisted channels of a DeerFlow thread and the reducers that merge updates into them.

Hooks return *state updates* (plain dicts, as in LangGraph); :func:`apply_update` folds an update into a
:class:`ThreadState` channel by channel. Channels with a reducer merge; the others are last-write-wins.
The reducers are DeerFlow's (``bytedance/deer-flow: backend/packages/harness/deerflow/agents/thread_state.py``),
including the corner cases UIs depend on: ``sandbox`` raises on conflicting ids, ``todos=None`` keeps while
``[]`` clears, ``viewed_images={}`` clears, ``promoted`` is scoped by catalog hash.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.messages import AnyMessage
from pydantic import BaseModel, ConfigDict, Field

from vocabulary.messages import MergesMessages, add_messages

StateUpdate = dict[str, Any]
"""A hook's return value: channel name → value, plus the control key ``jump_to``."""

CONTROL_KEYS = frozenset({"jump_to"})

DELEGATION_CAP = 50
SKILL_CONTEXT_CAP = 8
APPROVALS_CAP = 50
SKILL_DESCRIPTION_MAX_CHARS = 500
# DeerFlow's SUBAGENT_STATUS_VALUES (``bytedance/deer-flow:
# backend/packages/harness/deerflow/subagents/status_contract.py``): every status a finished task reports.
TERMINAL_DELEGATION_STATUSES = frozenset({"completed", "failed", "cancelled", "timed_out", "polling_timed_out"})


class ThreadState(BaseModel):
    """Everything a thread remembers between runs. Committed by the ``thread.commit`` activity."""

    model_config = ConfigDict(extra="forbid")

    messages: list[AnyMessage] = Field(default_factory=list)
    sandbox: dict[str, Any] | None = None
    thread_data: dict[str, Any] | None = None
    title: str | None = None
    artifacts: list[str] = Field(default_factory=list)
    todos: list[dict[str, Any]] | None = None
    goal: dict[str, Any] | None = None
    uploaded_files: list[dict[str, Any]] | None = None
    viewed_images: dict[str, dict[str, Any]] = Field(default_factory=dict)
    promoted: dict[str, Any] | None = None
    delegations: list[dict[str, Any]] = Field(default_factory=list)
    skill_context: list[dict[str, Any]] = Field(default_factory=list)
    summary_text: str | None = None
    background_tasks: list[dict[str, Any]] | None = None
    approvals: list[dict[str, Any]] = Field(default_factory=list)
    """Tool approval requests, pending and decided, with who decided what (``vocabulary/approvals.py``)."""


class SandboxConflictError(ValueError):
    """Two different sandbox ids were written to one thread."""


def merge_sandbox(existing: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any] | None:
    if new is None:
        return existing
    if existing is None:
        return new
    # As in DeerFlow, only the whole value may be None: a missing/None id next to a real one is a conflict too.
    existing_id, new_id = existing.get("sandbox_id"), new.get("sandbox_id")
    if existing_id == new_id:
        return existing
    raise SandboxConflictError(f"Conflicting sandbox state updates: {existing_id!r} != {new_id!r}")


def merge_artifacts(existing: list[str], new: list[str] | None) -> list[str]:
    if not new:
        return existing
    return list(dict.fromkeys([*existing, *new]))


def merge_todos(existing: list[dict[str, Any]] | None, new: list[dict[str, Any]] | None) -> Any:
    return existing if new is None else list(new)


def merge_goal(existing: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any] | None:
    return existing if new is None else new


def merge_viewed_images(
    existing: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]] | None
) -> dict[str, dict[str, Any]]:
    if new is None:
        return existing
    if not new:
        return {}
    return {**existing, **new}


def merge_promoted(existing: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any] | None:
    if not new or not new.get("catalog_hash"):
        return existing
    if existing is None or existing.get("catalog_hash") != new["catalog_hash"]:
        return {"catalog_hash": new["catalog_hash"], "names": list(dict.fromkeys(new.get("names") or []))}
    names = list(dict.fromkeys([*(existing.get("names") or []), *(new.get("names") or [])]))
    return {"catalog_hash": existing["catalog_hash"], "names": names}


def merge_delegations(existing: list[dict[str, Any]], new: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The delegation ledger: the latest entry per id replaces the earlier one in its first-seen position,
    except that an entry never leaves a terminal status (the downgrading entry is dropped whole)."""
    if not new:
        return existing
    by_id: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    for entry in [*existing, *new]:
        entry_id = entry["id"]
        previous = by_id.get(entry_id)
        if (
            previous is not None
            and previous.get("status") in TERMINAL_DELEGATION_STATUSES
            and entry.get("status") not in TERMINAL_DELEGATION_STATUSES
        ):
            continue
        if previous is None:
            order.append(entry_id)
        elif previous.get("created_at"):
            # DeerFlow keeps the first created_at, and the first run_id only when the update carries none.
            entry = {**entry, "created_at": previous["created_at"]}
            if previous.get("run_id") and not entry.get("run_id"):
                entry["run_id"] = previous["run_id"]
        by_id[entry_id] = entry
    return [by_id[entry_id] for entry_id in order][-DELEGATION_CAP:]


def _skill_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """DeerFlow's ``_normalize_skill_entry``: a bounded reference, never the SKILL.md body."""
    description, loaded_at = entry.get("description"), entry.get("loaded_at")
    return {
        "name": str(entry.get("name") or ""),
        "path": str(entry["path"]),
        "description": " ".join(description.split())[:SKILL_DESCRIPTION_MAX_CHARS]
        if isinstance(description, str)
        else "",
        "loaded_at": loaded_at if isinstance(loaded_at, int) else 0,
    }


def merge_skill_context(existing: list[dict[str, Any]], new: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Skill references by path: a re-read replaces the entry and makes it the most recent; the newest 8 stay."""
    normalized = [_skill_entry(entry) for entry in existing]
    if not new:
        return normalized
    by_path: dict[str, dict[str, Any]] = {}
    for entry in normalized:
        by_path[entry["path"]] = entry
    for entry in map(_skill_entry, new):
        by_path.pop(entry["path"], None)
        by_path[entry["path"]] = entry
    return list(by_path.values())[-SKILL_CONTEXT_CAP:]


def merge_approvals(existing: list[dict[str, Any]], new: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Approval records by ``request_id``: a later record of a request replaces it in place; the newest
    ``APPROVALS_CAP`` stay (older ones remain in the thread's earlier versions)."""
    if not new:
        return existing
    merged = {entry["request_id"]: entry for entry in existing}
    for entry in new:
        merged[entry["request_id"]] = entry
    return list(merged.values())[-APPROVALS_CAP:]


_REDUCERS: dict[str, Callable[[Any, Any], Any]] = {
    "sandbox": merge_sandbox,
    "artifacts": merge_artifacts,
    "todos": merge_todos,
    "goal": merge_goal,
    "viewed_images": merge_viewed_images,
    "promoted": merge_promoted,
    "delegations": merge_delegations,
    "skill_context": merge_skill_context,
    "approvals": merge_approvals,
}

REDUCER_FIELDS = frozenset({"messages", *_REDUCERS})
CHANNELS = frozenset(ThreadState.model_fields)


def apply_update(
    state: ThreadState,
    update: StateUpdate | None,
    *,
    new_id: Callable[[], str],
    merge_messages: MergesMessages = add_messages,
) -> ThreadState:
    """Fold one hook's update into ``state`` and return the new state (``state`` itself is not mutated).
    ``merge_messages``: the ``messages`` reducer, a run's :class:`~vocabulary.messages.MessageMerger` when it
    merges into one conversation again and again."""
    if not update:
        return state
    unknown = set(update) - CHANNELS - CONTROL_KEYS
    if unknown:
        raise ValueError(f"state update names unknown channel(s): {', '.join(sorted(unknown))}")
    changes: dict[str, Any] = {}
    for channel, value in update.items():
        if channel in CONTROL_KEYS:
            continue
        if channel == "messages":
            changes["messages"] = merge_messages(state.messages, value, new_id=new_id)
        elif channel in _REDUCERS:
            changes[channel] = _REDUCERS[channel](getattr(state, channel), value)
        else:
            changes[channel] = value
    return state.model_copy(update=changes)
