"""LangChain messages in the thread state, and LangGraph's `add_messages` reducer.

The reducer reproduces `langgraph.graph.message.add_messages` exactly, because DeerFlow's middlewares
(the DynamicContext ID swap, Summarization's REMOVE_ALL_MESSAGES rewrite, ViewImage's removal) rely on it:

* a message whose id is already present replaces that message in place;
* a message with a new id is appended;
* ``RemoveMessage(id=X)`` deletes X (deleting an unknown id raises ``ValueError``);
* ``RemoveMessage(id=REMOVE_ALL_MESSAGES)`` drops everything before it, keeping what follows it in the update;
* a message without an id gets one (from ``new_id``, which the workflow backs with ``workflow.uuid4()``);
* a message chunk (``AIMessageChunk`` …) is stored as its message class (``message_chunk_to_message``).

One deliberate difference: LangGraph returns the update's tail after ``REMOVE_ALL_MESSAGES`` verbatim, so a
``RemoveMessage`` in that tail would land in the state; ``ThreadState.messages`` cannot hold one (it would not
survive the commit/load round trip), so it is dropped.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    BaseMessageChunk,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    message_chunk_to_message,
)

REMOVE_ALL_MESSAGES = "__remove_all__"
_ID = operator.attrgetter("id")

MessageLike = AnyMessage | RemoveMessage

__all__ = [
    "REMOVE_ALL_MESSAGES",
    "AIMessage",
    "AnyMessage",
    "AppendedMessages",
    "BaseMessage",
    "HumanMessage",
    "MergesMessages",
    "MessageLike",
    "MessageMerger",
    "RemoveMessage",
    "SystemMessage",
    "ToolMessage",
    "add_messages",
    "extends",
    "is_hidden",
    "last_human_index",
    "message_text",
]


def extends(current: Sequence[object], previous: Sequence[object]) -> bool:
    """Whether ``current`` starts with the very objects of ``previous``, in order. Workflow code never changes a
    message in place (every change is a new message through the reducers or a request overlay), so such a list only
    appended to ``previous``: a hook that saw ``previous`` need only look at what follows it, and a turn's work does
    not grow with the conversation."""
    return len(current) >= len(previous) and all(map(operator.is_, previous, current))


class AppendedMessages:
    """Where a conversation a hook reads every turn picks up: while it only grows (:func:`extends`), only what
    follows the messages read last time is new, and what the hook derived from those still holds."""

    def __init__(self) -> None:
        self._read: list[BaseMessage] = []

    def start(self, messages: Sequence[BaseMessage]) -> int:
        """The index of the first message of ``messages`` not read before; 0 when they do not extend the ones read
        last time (a summary replaced some), and the caller derives everything again. ``messages`` are read now."""
        start = len(self._read) if extends(messages, self._read) else 0
        self._read = list(messages)
        return start


def add_messages(
    left: Sequence[BaseMessage],
    right: Iterable[BaseMessage] | BaseMessage,
    *,
    new_id: Callable[[], str],
) -> list[BaseMessage]:
    """Merge ``right`` into ``left`` with LangGraph ``add_messages`` semantics (pure: inputs are not mutated)."""
    return _merge(left, right, new_id, _Index())[0]


class MergesMessages(Protocol):
    """:func:`add_messages`, or a :class:`MessageMerger`'s call."""

    def __call__(
        self, left: Sequence[BaseMessage], right: Iterable[BaseMessage] | BaseMessage, *, new_id: Callable[[], str]
    ) -> list[BaseMessage]: ...


class MessageMerger:
    """:func:`add_messages` for one conversation merged again and again (a run's state, hook after hook): it keeps
    the id index of its last result, so a merge into a conversation that only grew from that result (:func:`extends`)
    indexes what was appended, not every message, and a turn's merges do not grow with the conversation."""

    def __init__(self) -> None:
        self._last: tuple[BaseMessage, ...] = ()
        """The last result, as it was (a copy: a list changed in place afterwards no longer extends it)."""
        self._position: dict[Any, int] = {}

    def __call__(
        self, left: Sequence[BaseMessage], right: Iterable[BaseMessage] | BaseMessage, *, new_id: Callable[[], str]
    ) -> list[BaseMessage]:
        known = _Index(len(self._last), self._position) if self._last and extends(left, self._last) else _Index()
        # The merge grows the index in place: it is this merger's again only once the merge succeeded.
        self._last, self._position = (), {}
        merged, position = _merge(left, right, new_id, known)
        if position is not None:
            self._last, self._position = tuple(merged), position
        return merged


class _Index:
    """The id → position index of a merge's ``left`` up to ``count`` (those messages normalized: a merge's result);
    the merge adds the rest to it."""

    def __init__(self, count: int = 0, position: dict[Any, int] | None = None) -> None:
        self.count = count
        self.position = {} if position is None else position


def _merge(
    left: Sequence[BaseMessage],
    right: Iterable[BaseMessage] | BaseMessage,
    new_id: Callable[[], str],
    known: _Index,
) -> tuple[list[BaseMessage], dict[Any, int] | None]:
    """The merge, and the id index of its result (``None`` when messages were removed)."""
    updates = [right] if isinstance(right, BaseMessage) else list(right)
    # Left before right, in the order LangGraph assigns missing ids. A state's messages were merged here before, so
    # they have theirs: telling so is cheaper than normalizing each, and takes no id either way.
    fresh = left[known.count :]
    if None not in map(_ID, fresh) and not any(issubclass(kind, BaseMessageChunk) for kind in set(map(type, fresh))):
        merged = list(left)
    else:
        merged = [*left[: known.count], *(_normalized(m, new_id) for m in fresh)]
    updates = [_normalized(m, new_id) for m in updates]

    remove_all_at = None
    for index, message in enumerate(updates):
        if isinstance(message, RemoveMessage) and message.id == REMOVE_ALL_MESSAGES:
            remove_all_at = index
    if remove_all_at is not None:
        return [m for m in updates[remove_all_at + 1 :] if not isinstance(m, RemoveMessage)], None

    position = known.position
    position.update(zip(map(_ID, merged[known.count :]), itertools.count(known.count)))
    removed: set[str] = set()
    for message in updates:
        existing = position.get(message.id)
        if existing is not None:
            if isinstance(message, RemoveMessage):
                removed.add(str(message.id))
            else:
                removed.discard(str(message.id))
                merged[existing] = message
        else:
            if isinstance(message, RemoveMessage):
                raise ValueError(f"Attempting to delete a message with an ID that doesn't exist ('{message.id}')")
            position[message.id] = len(merged)
            merged.append(message)
    if removed:
        return [m for m in merged if m.id not in removed], None
    return merged, position


def _normalized(message: BaseMessage, new_id: Callable[[], str]) -> BaseMessage:
    message = message_chunk_to_message(message)
    # Only a missing id is replaced: LangGraph keeps an empty-string id as an id.
    if message.id is not None:
        return message
    return message.model_copy(update={"id": new_id()})


def message_text(message: BaseMessage) -> str:
    """The visible text of a message, whether its content is a string or a list of content blocks."""
    content: Any = message.content
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "".join(parts)


def last_ai_message(messages: Sequence[BaseMessage]) -> AIMessage | None:
    """The newest AIMessage, if any."""
    return next((message for message in reversed(messages) if isinstance(message, AIMessage)), None)


def is_hidden(message: BaseMessage) -> bool:
    return bool(message.additional_kwargs.get("hide_from_ui"))


def last_human_index(messages: Sequence[BaseMessage]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], HumanMessage):
            return index
    return None
