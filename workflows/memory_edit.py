"""A user's own change to their memory (Settings → Memory, ``hartflow memory``) as a pure function the memory
workflow's ``edit`` update replays: create, update or delete a fact, clear, import — DeerFlow's manual fact
operations (``bytedance/deer-flow: backend/app/gateway/routers/memory.py``: a created fact has source
``manual``, its content must be new, its confidence within 0–1).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

from vocabulary.contracts.memory import MemoryEdit, empty_memory


class MemoryEditError(ValueError):
    """The edit cannot be applied; ``kind`` names why (the API's status follows it)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


NOT_FOUND = "MemoryFactNotFound"
DUPLICATE = "MemoryFactDuplicate"
INVALID = "MemoryEditInvalid"


def apply_edit(memory: dict[str, Any], edit: MemoryEdit, *, now: str, new_id: Callable[[], str]) -> dict[str, Any]:
    """``memory`` with ``edit`` applied and ``lastUpdated`` stamped (a new document; ``memory`` is not changed)."""
    if edit.op == "clear":
        result = empty_memory()
    elif edit.op == "import":
        if not isinstance(edit.document, dict):
            raise MemoryEditError(INVALID, "an import needs a memory document")
        result = copy.deepcopy(edit.document)
    else:
        result = copy.deepcopy(memory)
        facts = [fact for fact in result.get("facts") or [] if isinstance(fact, dict)]
        result["facts"] = _edit_facts(facts, edit, now=now, new_id=new_id)
    result["lastUpdated"] = now
    return result


def _edit_facts(
    facts: list[dict[str, Any]], edit: MemoryEdit, *, now: str, new_id: Callable[[], str]
) -> list[dict[str, Any]]:
    if edit.op == "create_fact":
        content = _content(edit.content)
        _refuse_duplicate(facts, content, keep=None)
        fact = {
            "id": f"fact_{new_id()}",
            "content": content,
            "category": _category(edit.category),
            "confidence": _confidence(0.5 if edit.confidence is None else edit.confidence),
            "createdAt": now,
            "source": "manual",
        }
        return [*facts, fact]
    index = next((i for i, fact in enumerate(facts) if fact.get("id") == edit.fact_id), None)
    if index is None:
        raise MemoryEditError(NOT_FOUND, f"Memory fact '{edit.fact_id}' not found.")
    if edit.op == "delete_fact":
        return facts[:index] + facts[index + 1 :]
    fact = dict(facts[index])
    if edit.content is not None:
        content = _content(edit.content)
        _refuse_duplicate(facts, content, keep=edit.fact_id)
        fact["content"] = content
    if edit.category is not None:
        fact["category"] = _category(edit.category)
    if edit.confidence is not None:
        fact["confidence"] = _confidence(edit.confidence)
    return [*facts[:index], fact, *facts[index + 1 :]]


def _content(value: str | None) -> str:
    content = (value or "").strip()
    if not content:
        raise MemoryEditError(INVALID, "Memory fact content cannot be empty.")
    return content


def _category(value: str | None) -> str:
    return (value or "").strip() or "context"


def _confidence(value: float) -> float:
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise MemoryEditError(INVALID, "Invalid confidence value; must be between 0 and 1.")
    return float(value)


def _refuse_duplicate(facts: list[dict[str, Any]], content: str, *, keep: str | None) -> None:
    key = content.casefold()
    for fact in facts:
        if fact.get("id") != keep and str(fact.get("content", "")).strip().casefold() == key:
            raise MemoryEditError(DUPLICATE, "A fact with the same content already exists.")
