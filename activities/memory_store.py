"""The per-user memory store and the ``memory.load`` activity DynamicContext awaits.

Layout: one document per user, key ``users/{user_id}/memory.json`` of the configured object store (on the
filesystem backend ``{home}/users/{user_id}/memory.json``, on S3 under the bucket's prefix), in DeerFlow's
memory shape (deermem's compatibility document)::

    {"version": "1.0", "lastUpdated": "<ISO-8601>",
     "user":    {"workContext": {"summary", "updatedAt"}, "personalContext": {…}, "topOfMind": {…}},
     "history": {"recentMonths": {"summary", "updatedAt"}, "earlierContext": {…}, "longTermBackground": {…}},
     "facts":   [{"id", "content", "category", "confidence", "createdAt", "source"}]}

Writers (the Memory middleware's per-user memory workflow, through ``memory.read``/``memory.save``) go through
:func:`save_memory`, which replaces the object atomically so a reader never sees half a document; readers through
:func:`load_memory`.
:func:`format_memory_for_injection` is DeerFlow's formatter with its ``legacy`` ranking (facts by confidence)
and its network-free ``char`` token counting, so the injected block is the same on every worker.
"""

from __future__ import annotations

import html
import json
import math
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.contract import implements
from activities.storage import ObjectStore, StorageError, activity_errors
from vocabulary.contracts import (
    MEMORY_LOAD,
    MEMORY_READ,
    MEMORY_SAVE,
    MemoryContext,
    MemoryDocument,
    MemoryLoadInput,
    MemoryReadInput,
    MemorySaveInput,
)
from vocabulary.contracts.memory import empty_memory
from vocabulary.paths import validate_user_id

MEMORY_FILE = "memory.json"
_USER_SECTIONS = (("workContext", "Work"), ("personalContext", "Personal"), ("topOfMind", "Current Focus"))
_HISTORY_SECTIONS = (("recentMonths", "Recent"), ("earlierContext", "Earlier"), ("longTermBackground", "Background"))
_FACTS_HEADER = "Facts:\n"


class MemoryStoreError(ValueError):
    """A memory file that exists but is not a memory document."""


def memory_key(user_id: str) -> str:
    return f"users/{validate_user_id(user_id)}/{MEMORY_FILE}"


def load_memory(store: ObjectStore, user_id: str) -> dict[str, Any]:
    """The user's memory document; an empty one when the user has none yet."""
    key = memory_key(user_id)
    raw = store.get(key)
    if raw is None:
        return empty_memory()
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MemoryStoreError(f"{key} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise MemoryStoreError(f"{key} must hold a JSON object")
    return data


def save_memory(store: ObjectStore, user_id: str, data: dict[str, Any]) -> None:
    """Replace the user's memory document atomically (readers see the old or the new one, never a mix)."""
    store.put(memory_key(user_id), json.dumps(data, ensure_ascii=False, indent=2).encode("utf-8"))


# -- injection format (DeerFlow's ``format_memory_for_injection``) ------------------------------------------


def count_tokens(text: str) -> int:
    """DeerFlow's network-free estimate: ~4 characters per token, ~2 for CJK characters."""
    cjk = sum(
        1 for ch in text if "\u4e00" <= ch <= "\u9fff" or "\u3040" <= ch <= "\u30ff" or "\uac00" <= ch <= "\ud7a3"
    )
    return (len(text) - cjk) // 4 + cjk // 2


def _confidence(value: Any) -> float:
    try:
        confidence = float(value)
    except (TypeError, ValueError):
        return 0.0
    return max(0.0, min(1.0, confidence)) if math.isfinite(confidence) else 0.0


def _fact_line(fact: dict[str, Any]) -> str | None:
    content = fact.get("content")
    if not isinstance(content, str) or not content.strip():
        return None
    # Facts are user-editable: escaped so a "</memory>" inside one cannot close the block it is rendered in.
    text = html.escape(content.strip(), quote=False)
    category = html.escape(str(fact.get("category", "context")).strip() or "context", quote=False)
    source_error = fact.get("sourceError")
    if category == "correction" and isinstance(source_error, str) and source_error.strip():
        avoid = html.escape(source_error.strip(), quote=False)
        return f"- [{category} | {_confidence(fact.get('confidence')):.2f}] {text} (avoid: {avoid})"
    return f"- [{category} | {_confidence(fact.get('confidence')):.2f}] {text}"


def _summary_section(data: Any, title: str, keys: tuple[tuple[str, str], ...]) -> str | None:
    if not isinstance(data, dict):
        return None
    lines = []
    for key, label in keys:
        section = data.get(key)
        if isinstance(section, dict) and section.get("summary"):
            lines.append(f"- {label}: {html.escape(str(section['summary']), quote=False)}")
    return f"{title}:\n" + "\n".join(lines) if lines else None


def format_memory_for_injection(memory: dict[str, Any], max_tokens: int = 2000) -> str:
    """The text inside ``<memory>``: user context, history, then facts by confidence within ``max_tokens``."""
    sections = [
        section
        for section in (
            _summary_section(memory.get("user"), "User Context", _USER_SECTIONS),
            _summary_section(memory.get("history"), "History", _HISTORY_SECTIONS),
        )
        if section
    ]
    fact_lines: list[str] = []
    facts = memory.get("facts")
    if isinstance(facts, list):
        ranked = sorted(
            (f for f in facts if isinstance(f, dict)), key=lambda f: _confidence(f.get("confidence")), reverse=True
        )
        base = "\n\n".join(sections)
        budget = max_tokens - (count_tokens(base) if base else 0) - count_tokens(_FACTS_HEADER)
        used = 0
        for fact in ranked:
            line = _fact_line(fact)
            if line is None:
                continue
            cost = count_tokens(f"\n{line}" if fact_lines else line)
            if used + cost > budget:
                break  # strictly by rank: a shorter, less confident fact never slips past a skipped one
            fact_lines.append(line)
            used += cost
    facts_block = _FACTS_HEADER + "\n".join(fact_lines) if fact_lines else ""
    result = "\n\n".join([*sections, facts_block] if facts_block else sections)
    if count_tokens(result) <= max_tokens:
        return result
    # Over budget: the facts block is kept whole and the summaries before it are cut from their end.
    preceding = "\n\n".join(sections)
    room = max(0, max_tokens - count_tokens(facts_block) - (count_tokens("\n\n") if facts_block else 0))
    if not preceding:
        return facts_block
    tokens = count_tokens(preceding)
    if tokens > room:
        preceding = preceding[: int(room * len(preceding) / max(tokens, 1) * 0.95)].rstrip() + "\n..."
    return f"{preceding}\n\n{facts_block}" if facts_block else preceding


class MemoryActivities:
    def __init__(self, store: ObjectStore) -> None:
        self._store = store

    @implements(MEMORY_LOAD)
    def load(self, input: MemoryLoadInput) -> MemoryContext:
        """The user's memory formatted for injection; empty (nothing to inject) when unreadable, as in DeerFlow."""
        try:
            memory = load_memory(self._store, input.user_id)
        except (MemoryStoreError, OSError, StorageError) as exc:
            activity.logger.warning("memory of user %s not injected: %s", input.user_id, exc)
            return MemoryContext("")
        return MemoryContext(format_memory_for_injection(memory, input.max_tokens))

    @implements(MEMORY_READ)
    def read(self, input: MemoryReadInput) -> MemoryDocument:
        """The raw document, for the memory workflow's update. A corrupt file fails the update for good rather
        than being overwritten by one built from scratch."""
        try:
            with activity_errors():
                return MemoryDocument(load_memory(self._store, input.user_id))
        except MemoryStoreError as exc:
            raise ApplicationError(str(exc), type="MemoryStoreError", non_retryable=True) from exc

    @implements(MEMORY_SAVE)
    def save(self, input: MemorySaveInput) -> None:
        with activity_errors():
            save_memory(self._store, input.user_id, input.data)
