"""`add_messages` against LangGraph's (langgraph 1.2.9 ``graph/message.py``), and the small message helpers.

LangGraph is the oracle but not a dependency, so the property tests compare the implementation with a
reference model written here: a dict keyed by id, whose insertion order is the message order.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessageChunk, HumanMessageChunk

from vocabulary.messages import (
    REMOVE_ALL_MESSAGES,
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    add_messages,
    is_hidden,
    last_human_index,
    message_text,
)

PROPERTY = settings(max_examples=100, deadline=None)


def id_source(prefix: str = "gen") -> Callable[[], str]:
    """A deterministic stand-in for the workflow's ``ctx.uuid``: gen-0, gen-1, …"""
    counter = itertools.count()
    return lambda: f"{prefix}-{next(counter)}"


def ids(messages: Sequence[BaseMessage]) -> list[str | None]:
    return [m.id for m in messages]


def unknown_id_error(message_id: str) -> str:
    return re.escape(f"Attempting to delete a message with an ID that doesn't exist ('{message_id}')")


# --- examples -------------------------------------------------------------------------------------------


def test_same_id_replaces_in_place_even_with_another_message_type() -> None:
    left = [HumanMessage("q", id="1"), AIMessage("draft", id="2"), HumanMessage("more", id="3")]

    merged = add_messages(left, [SystemMessage("swapped", id="2")], new_id=id_source())

    assert ids(merged) == ["1", "2", "3"]
    assert isinstance(merged[1], SystemMessage)
    assert merged[1].content == "swapped"


def test_new_ids_append_in_update_order() -> None:
    merged = add_messages(
        [HumanMessage("q", id="1")], [AIMessage("a", id="3"), AIMessage("b", id="2")], new_id=id_source()
    )

    assert ids(merged) == ["1", "3", "2"]


def test_missing_ids_come_from_new_id_left_first_then_right() -> None:
    calls: list[str] = []
    source = id_source()

    def new_id() -> str:
        calls.append(source())
        return calls[-1]

    merged = add_messages(
        [HumanMessage("q"), AIMessage("a", id="x")], [AIMessage("b"), ToolMessage("t", tool_call_id="c")], new_id=new_id
    )

    assert ids(merged) == ["gen-0", "x", "gen-1", "gen-2"]
    assert calls == ["gen-0", "gen-1", "gen-2"]


def test_a_single_message_is_accepted_as_the_update() -> None:
    merged = add_messages([HumanMessage("q", id="1")], AIMessage("a"), new_id=id_source())

    assert ids(merged) == ["1", "gen-0"]


def test_an_empty_string_id_is_an_id_as_in_langgraph() -> None:
    """LangGraph only fills ``id is None``; two messages with ``id=""`` therefore replace each other."""
    new_id = id_source()
    merged = add_messages([HumanMessage("first", id="")], [HumanMessage("second", id="")], new_id=new_id)

    assert [(m.id, m.content) for m in merged] == [("", "second")]
    assert new_id() == "gen-0"


def test_remove_message_deletes_by_id() -> None:
    left = [HumanMessage("q", id="1"), AIMessage("a", id="2"), HumanMessage("r", id="3")]

    assert ids(add_messages(left, [RemoveMessage(id="2")], new_id=id_source())) == ["1", "3"]


def test_remove_then_rewrite_in_one_update_keeps_the_rewrite_in_place() -> None:
    left = [HumanMessage("q", id="1"), AIMessage("a", id="2"), HumanMessage("r", id="3")]

    merged = add_messages(left, [RemoveMessage(id="2"), AIMessage("a2", id="2")], new_id=id_source())

    assert [(m.id, m.content) for m in merged] == [("1", "q"), ("2", "a2"), ("3", "r")]


def test_a_message_appended_and_removed_in_one_update_is_gone() -> None:
    merged = add_messages(
        [HumanMessage("q", id="1")], [AIMessage("a", id="9"), RemoveMessage(id="9")], new_id=id_source()
    )

    assert ids(merged) == ["1"]


def test_removing_an_unknown_id_raises_langgraphs_error() -> None:
    with pytest.raises(ValueError, match=unknown_id_error("nope")):
        add_messages([HumanMessage("q", id="1")], [RemoveMessage(id="nope")], new_id=id_source())


def test_removing_a_message_twice_in_one_update_is_fine() -> None:
    merged = add_messages(
        [HumanMessage("q", id="1"), AIMessage("a", id="2")],
        [RemoveMessage(id="2"), RemoveMessage(id="2")],
        new_id=id_source(),
    )

    assert ids(merged) == ["1"]


def test_remove_all_keeps_only_what_follows_the_last_marker() -> None:
    left = [HumanMessage("q", id="1"), AIMessage("a", id="2")]
    update = [
        AIMessage("before", id="3"),
        RemoveMessage(id=REMOVE_ALL_MESSAGES),
        HumanMessage("dropped too", id="4"),
        RemoveMessage(id=REMOVE_ALL_MESSAGES),
        HumanMessage("kept", id="5"),
        AIMessage("kept, id assigned"),
    ]

    merged = add_messages(left, update, new_id=id_source())

    assert [(m.id, m.content) for m in merged] == [("5", "kept"), ("gen-0", "kept, id assigned")]


def test_remove_all_returns_before_unknown_removals_are_checked() -> None:
    """LangGraph returns the tail as soon as it finds the marker, so an unknown id before it never raises."""
    update = [RemoveMessage(id="nope"), RemoveMessage(id=REMOVE_ALL_MESSAGES), HumanMessage("h", id="1")]

    assert ids(add_messages([AIMessage("a", id="2")], update, new_id=id_source())) == ["1"]


def test_remove_all_as_the_last_item_clears_everything() -> None:
    merged = add_messages([HumanMessage("q", id="1")], [RemoveMessage(id=REMOVE_ALL_MESSAGES)], new_id=id_source())

    assert merged == []


def test_a_remove_message_after_remove_all_is_not_stored() -> None:
    """Deliberate deviation (see the module docstring): ThreadState.messages cannot hold a RemoveMessage."""
    update = [RemoveMessage(id=REMOVE_ALL_MESSAGES), HumanMessage("h", id="1"), RemoveMessage(id="1")]

    merged = add_messages([AIMessage("a", id="2")], update, new_id=id_source())

    assert [(type(m), m.id) for m in merged] == [(HumanMessage, "1")]


def test_chunks_are_stored_as_messages() -> None:
    chunk = AIMessageChunk(
        content="partial",
        id="c",
        tool_call_chunks=[{"name": "bash", "args": '{"command": "ls"}', "id": "call-1", "index": 0}],
    )

    merged = add_messages([HumanMessageChunk(content="q", id="h")], [chunk], new_id=id_source())

    assert [type(m) for m in merged] == [HumanMessage, AIMessage]
    assert merged[1].tool_calls == [  # type: ignore[attr-defined]
        {"name": "bash", "args": {"command": "ls"}, "id": "call-1", "type": "tool_call"}
    ]


def test_inputs_are_never_mutated() -> None:
    left = [HumanMessage("q"), AIMessage("a", id="2")]
    update = [HumanMessage("r"), AIMessage("a2", id="2"), RemoveMessage(id="2")]
    left_before = [m.model_dump() for m in left]
    update_before = [m.model_dump() for m in update]

    add_messages(left, update, new_id=id_source())

    assert [m.model_dump() for m in left] == left_before
    assert [m.model_dump() for m in update] == update_before
    assert left[0].id is None and update[0].id is None


def test_dynamic_context_id_swap() -> None:
    """DynamicContext's technique: the reminder takes the user message's id, the copies are appended."""
    user = HumanMessage("what is new?", id="X", name="alice", additional_kwargs={"k": "v"})
    left = [SystemMessage("sys", id="s"), user]
    reminder = SystemMessage(
        "<system-reminder>\n<current_date>2026-05-08, Friday</current_date>\n</system-reminder>",
        id="X",
        additional_kwargs={"hide_from_ui": True, "dynamic_context_reminder": True, "reminder_date": "2026-05-08"},
    )
    memory = HumanMessage(
        "<memory>\nlikes tea\n</memory>",
        id="X__memory",
        additional_kwargs={"hide_from_ui": True, "dynamic_context_reminder": True},
    )
    copy = HumanMessage(user.content, id="X__user", name=user.name, additional_kwargs=user.additional_kwargs)

    merged = add_messages(left, [reminder, memory, copy], new_id=id_source())

    assert ids(merged) == ["s", "X", "X__memory", "X__user"]
    assert merged[1] is reminder
    assert [is_hidden(m) for m in merged] == [False, True, True, False]


def test_view_image_context_removal() -> None:
    """ViewImage appends a hidden image-context message and removes it by id after the model call."""
    context = HumanMessage(
        [{"type": "text", "text": "Here are the images you've viewed:"}],
        id="view-image-context:abc",
        additional_kwargs={"hide_from_ui": True, "deerflow_view_image_context": True},
    )
    left = add_messages([HumanMessage("look", id="1")], [context], new_id=id_source())

    assert ids(add_messages(left, [RemoveMessage(id=context.id or "")], new_id=id_source())) == ["1"]


def test_message_text_reads_strings_and_text_blocks() -> None:
    blocks = HumanMessage(["a", {"type": "text", "text": "b"}, {"type": "image_url", "image_url": {"url": "u"}}])

    assert message_text(blocks) == "ab"
    assert message_text(AIMessage("plain")) == "plain"


def test_last_human_index() -> None:
    messages = [HumanMessage("1"), AIMessage("2"), HumanMessage("3"), ToolMessage("4", tool_call_id="c")]

    assert last_human_index(messages) == 2
    assert last_human_index([AIMessage("x")]) is None


# --- properties against the reference model -------------------------------------------------------------

ID_POOL = ["a", "b", "c", "d", "e", "f"]


@st.composite
def a_message(draw: st.DrawFn, *, id_strategy: st.SearchStrategy[str | None] | None = None) -> BaseMessage:
    message_id = draw(id_strategy if id_strategy is not None else st.none() | st.sampled_from(ID_POOL))
    content = draw(st.text(alphabet="xyz", max_size=3))
    kind = draw(st.sampled_from(["human", "ai", "system", "tool"]))
    if kind == "human":
        return HumanMessage(content, id=message_id)
    if kind == "ai":
        return AIMessage(content, id=message_id)
    if kind == "system":
        return SystemMessage(content, id=message_id)
    return ToolMessage(content, tool_call_id="call-1", id=message_id)


@st.composite
def a_state(draw: st.DrawFn) -> list[BaseMessage]:
    """A message list as add_messages leaves it: explicit ids are unique (some may still be missing)."""
    messages = draw(st.lists(a_message(), max_size=6))
    seen: set[str] = set()
    unique = []
    for message in messages:
        if message.id is None or message.id not in seen:
            unique.append(message)
            if message.id is not None:
                seen.add(message.id)
    return unique


@st.composite
def an_update_item(draw: st.DrawFn) -> BaseMessage:
    kind = draw(st.sampled_from(["message", "message", "message", "remove", "remove", "remove_all"]))
    if kind == "message":
        return draw(a_message())
    if kind == "remove":
        return RemoveMessage(id=draw(st.sampled_from(ID_POOL)))
    return RemoveMessage(id=REMOVE_ALL_MESSAGES)


def reference_add_messages(
    left: Sequence[BaseMessage], right: Sequence[BaseMessage], new_id: Callable[[], str]
) -> list[BaseMessage]:
    """LangGraph's semantics as a dict simulation (left ids unique), with the RemoveMessage-after-clear deviation."""

    def with_id(message: BaseMessage) -> BaseMessage:
        return message if message.id is not None else message.model_copy(update={"id": new_id()})

    left = [with_id(m) for m in left]
    right = [with_id(m) for m in right]
    clears = [i for i, m in enumerate(right) if isinstance(m, RemoveMessage) and m.id == REMOVE_ALL_MESSAGES]
    if clears:
        return [m for m in right[clears[-1] + 1 :] if not isinstance(m, RemoveMessage)]
    by_id: dict[str | None, BaseMessage] = {m.id: m for m in left}
    tombstones: set[str | None] = set()
    for message in right:
        if isinstance(message, RemoveMessage):
            if message.id not in by_id:
                raise ValueError(f"Attempting to delete a message with an ID that doesn't exist ('{message.id}')")
            tombstones.add(message.id)
        else:
            tombstones.discard(message.id)
            by_id[message.id] = message
    return [m for message_id, m in by_id.items() if message_id not in tombstones]


@PROPERTY
@given(left=a_state(), right=st.lists(an_update_item(), max_size=6))
def test_add_messages_matches_the_reference_model(left: list[BaseMessage], right: list[BaseMessage]) -> None:
    actual_ids, expected_ids = id_source(), id_source()
    try:
        expected = reference_add_messages(left, right, expected_ids)
    except ValueError as error:
        with pytest.raises(ValueError, match=re.escape(str(error))):
            add_messages(left, right, new_id=actual_ids)
        return

    actual = add_messages(left, right, new_id=actual_ids)

    assert actual == expected
    assert all(m.id is not None for m in actual)
    # Both consumed the same number of generated ids, in the same order.
    assert actual_ids() == expected_ids()


@PROPERTY
@given(left=a_state(), right=st.lists(an_update_item(), max_size=6))
def test_add_messages_never_mutates_its_inputs(left: list[BaseMessage], right: list[BaseMessage]) -> None:
    left_before = [m.model_dump() for m in left]
    right_before = [m.model_dump() for m in right]

    # An unknown-id removal raises; the inputs must be untouched either way.
    with contextlib.suppress(ValueError):
        add_messages(left, right, new_id=id_source())

    assert [m.model_dump() for m in left] == left_before
    assert [m.model_dump() for m in right] == right_before


@PROPERTY
@given(left=a_state(), data=st.data())
def test_replace_only_updates_keep_order_and_length_and_are_idempotent(
    left: list[BaseMessage], data: st.DataObject
) -> None:
    state = add_messages([], left, new_id=id_source("left"))
    present = ids(state)
    update = data.draw(
        st.lists(a_message(id_strategy=st.sampled_from(present)), max_size=6) if present else st.just([])
    )

    once = add_messages(state, update, new_id=id_source())
    twice = add_messages(once, update, new_id=id_source())

    assert ids(once) == present
    assert twice == once
    for message_id in {m.id for m in update}:
        latest = [m for m in update if m.id == message_id][-1]
        assert once[present.index(message_id)] == latest


@PROPERTY
@given(left=a_state(), right=st.lists(a_message(id_strategy=st.sampled_from(ID_POOL)), max_size=6))
def test_updates_with_ids_and_no_removals_are_idempotent(left: list[BaseMessage], right: list[BaseMessage]) -> None:
    state = add_messages([], left, new_id=id_source("left"))

    once = add_messages(state, right, new_id=id_source())

    assert add_messages(once, right, new_id=id_source()) == once


@PROPERTY
@given(left=a_state(), right=st.lists(a_message(), max_size=6))
def test_length_grows_by_the_new_ids_of_a_removal_free_update(
    left: list[BaseMessage], right: list[BaseMessage]
) -> None:
    state = add_messages([], left, new_id=id_source("left"))
    known = {m.id for m in state}
    new_explicit = {m.id for m in right if m.id is not None} - known
    new_anonymous = sum(m.id is None for m in right)

    merged = add_messages(state, right, new_id=id_source())

    assert len(merged) == len(state) + len(new_explicit) + new_anonymous
    assert len(set(ids(merged))) == len(merged)
    assert ids(merged)[: len(state)] == ids(state)


@PROPERTY
@given(left=a_state(), removed=st.sets(st.sampled_from(ID_POOL)))
def test_length_shrinks_by_the_removed_ids(left: list[BaseMessage], removed: set[str]) -> None:
    state = add_messages([], left, new_id=id_source("left"))
    removable = removed & {m.id for m in state}

    merged = add_messages(state, [RemoveMessage(id=i) for i in sorted(removable)], new_id=id_source())

    assert len(merged) == len(state) - len(removable)
    assert ids(merged) == [m.id for m in state if m.id not in removable]
