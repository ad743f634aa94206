"""A user's long-term memory: read for injection and by the memory workflow, saved by it
(``activities/memory_store.py``), and conversations queued for it (``activities/memory_queue.py``,
``workflows/memory.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import AnyMessage

from vocabulary.activity_ref import ActivityRef


@dataclass
class MemoryLoadInput:
    user_id: str
    max_tokens: int = 2000
    """DeerFlow's ``memory.max_injection_tokens``: the formatted memory is cut to this many tokens."""


@dataclass
class MemoryContext:
    content: str
    """The user's memory formatted for injection (without the ``<memory>`` tags); empty: nothing to inject."""


@dataclass
class MemoryUpdateSettings:
    """How the memory workflow treats a queued conversation (from the run's ``middlewares.memory``)."""

    model: str
    """Model spec of the extraction call."""
    debounce_seconds: float = 30
    fact_confidence_threshold: float = 0.7
    max_facts: int = 100


@dataclass
class MemoryItem:
    """One run's conversation (user turns and final answers only) queued for memory extraction."""

    id: str
    """The run's ``{workflow id}/{run id}``: a retried enqueue is recognised and dropped."""
    thread_id: str
    messages: list[AnyMessage]
    settings: MemoryUpdateSettings


@dataclass
class MemoryEnqueueInput:
    user_id: str
    item: MemoryItem


@dataclass
class MemoryWorkflowInput:
    user_id: str
    pending: list[MemoryItem] = field(default_factory=list)
    """Conversations queued but not yet extracted (carried across continue-as-new)."""
    model_calls: int = 0
    """Extraction calls made so far: the next call's ``call_index``."""
    extractions: int = 0
    seen: list[str] = field(default_factory=list)
    """Ids of the most recently accepted items."""


@dataclass
class MemoryReadInput:
    user_id: str


@dataclass
class MemoryDocument:
    data: dict[str, Any]
    """The user's memory document (``activities/memory_store.py`` describes its shape)."""


@dataclass
class MemorySaveInput:
    user_id: str
    data: dict[str, Any]


MemoryEditOp = Literal["create_fact", "update_fact", "delete_fact", "clear", "import"]


@dataclass
class MemoryEdit:
    """A change a user asks for (Settings → Memory, ``hartflow memory``), applied by the memory workflow's
    ``edit`` update so it is serialised with the extractions (``workflows/memory_edit.py`` applies it)."""

    op: MemoryEditOp
    fact_id: str | None = None
    """``update_fact``/``delete_fact``: the fact."""
    content: str | None = None
    category: str | None = None
    confidence: float | None = None
    document: dict[str, Any] | None = None
    """``import``: the whole document that replaces the user's memory (checked by the caller)."""


def empty_memory() -> dict[str, Any]:
    """DeerFlow's ``create_empty_memory`` (without a timestamp: the writer stamps ``lastUpdated``)."""
    section = {"summary": "", "updatedAt": ""}
    return {
        "version": "1.0",
        "lastUpdated": "",
        "user": {key: dict(section) for key in ("workContext", "personalContext", "topOfMind", "cognitiveStyle")},
        "history": {key: dict(section) for key in ("recentMonths", "earlierContext", "longTermBackground")},
        "facts": [],
    }


MEMORY_LOAD = ActivityRef("memory.load", MemoryLoadInput, MemoryContext)
MEMORY_READ = ActivityRef("memory.read", MemoryReadInput, MemoryDocument)
MEMORY_SAVE = ActivityRef("memory.save", MemorySaveInput, type(None))
MEMORY_ENQUEUE = ActivityRef("memory.enqueue", MemoryEnqueueInput, type(None))

MEMORY_WORKFLOW = "HartflowMemory"
MEMORY_WORKFLOW_ID_PREFIX = "hartflow-memory-"
"""The per-user memory workflow's id is this prefix and the user id: one memory queue per user."""
MEMORY_ENQUEUE_SIGNAL = "enqueue"
MEMORY_EDIT_UPDATE = "edit"
"""The memory workflow's update that applies a :class:`MemoryEdit` and returns the saved document."""
