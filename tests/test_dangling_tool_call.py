"""DanglingToolCall: DeerFlow's repairs of the model-bound transcript, the no-op guarantee for valid
transcripts, and a real run whose request is repaired while the committed state stays as it was."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from temporalio.client import Client

from activities.thread_store import FilesystemThreadStore
from middlewares._transcript_repair import EMPTY_NAME_TEXT, INTERRUPTED_TEXT
from middlewares.base import ModelRequest
from middlewares.dangling_tool_call import DanglingToolCallMiddleware, patch_messages
from tests.support import StubRunContext, start_run, thread_state
from vocabulary.contracts import MODEL_INVOKE, ModelCallInput, ThreadRef
from vocabulary.state import ThreadState
from workers.testing import answer, make_config, running_worker, settle, unique, write_script
from workers.testing.history import history_events, scheduled_inputs


def _call(name: Any = "bash", call_id: Any = "call_1", **args: Any) -> dict[str, Any]:
    return {"name": name, "id": call_id, "args": args, "type": "tool_call"}


def _ai(*calls: dict[str, Any], **kwargs: Any) -> AIMessage:
    return AIMessage(content="", tool_calls=list(calls), **kwargs)


def _invalid(name: Any = "write_file", call_id: Any = "write_file:36", error: Any = "Failed to parse tool arguments"):
    return {
        "type": "invalid_tool_call",
        "name": name,
        "id": call_id,
        "args": '{"path":"/mnt/user-data/outputs/report.md","content":"bad {"json"}"}',
        "error": error,
    }


def _raw_ai(*raw: dict[str, Any]) -> AIMessage:
    """An AIMessage whose calls exist only in the raw provider payload. Assigned after construction:
    langchain's constructor would parse the payload into ``tool_calls``/``invalid_tool_calls``."""
    message = AIMessage("")
    message.additional_kwargs = {"tool_calls": list(raw)}
    return message


def _result(call_id: str, name: str = "bash", content: str = "result") -> ToolMessage:
    return ToolMessage(content, tool_call_id=call_id, name=name)


def _shape(messages: list[BaseMessage]) -> list[str]:
    """A compact picture: ``ai:id1,id2`` / ``tool:id`` (``!`` marks a synthetic error) / ``human``."""
    out = []
    for m in messages:
        if isinstance(m, AIMessage):
            ids = [c["id"] for c in m.tool_calls] + [c["id"] for c in m.invalid_tool_calls]
            out.append("ai:" + ",".join(str(i) for i in ids))
        elif isinstance(m, ToolMessage):
            out.append(f"tool:{m.tool_call_id}{'!' if m.status == 'error' else ''}")
        else:
            out.append(m.type)
    return out


# -- valid transcripts are left alone -------------------------------------------------------------------


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [HumanMessage("hello")],
        [AIMessage("hello")],
        [_ai(_call("bash", "call_1")), _result("call_1")],
        [_ai(_call("bash", "call_1")), _result("call_1"), HumanMessage("next")],
        [_ai(_call("bash", "a"), _call("ls", "b")), _result("a"), _result("b", "ls"), AIMessage("done")],
        [_ai(invalid_tool_calls=[{**_invalid(), "args": "{}"}]), _result("write_file:36", "write_file")],
    ],
)
def test_valid_transcripts_need_no_patch(messages: list[BaseMessage]) -> None:
    assert patch_messages(messages) is None


async def test_a_valid_transcript_reaches_the_model_as_the_very_same_request() -> None:
    messages: list[BaseMessage] = [
        SystemMessage("sys"),
        HumanMessage("hi", id="h1"),
        _ai(_call("bash", "a", command="ls"), _call("read_file", "b", path="/x"), id="a1"),
        _result("a"),
        _result("b", "read_file"),
        AIMessage("done", id="a2"),
    ]
    originals = list(messages)
    request = ModelRequest(messages, None, [], ThreadState(), StubRunContext(), "scripted:x")
    seen: list[ModelRequest] = []

    async def model(r: ModelRequest) -> AIMessage:
        seen.append(r)
        return AIMessage("ok")

    await DanglingToolCallMiddleware().wrap_model_call(request, model)
    assert seen[0] is request
    assert all(a is b for a, b in zip(seen[0].messages, originals, strict=True))


# -- dangling calls get placeholders right after their AIMessage ----------------------------------------


def test_single_dangling_call() -> None:
    patched = patch_messages([_ai(_call("bash", "call_1"))])
    assert patched is not None and _shape(patched) == ["ai:call_1", "tool:call_1!"]
    placeholder = patched[1]
    assert isinstance(placeholder, ToolMessage)
    assert (placeholder.content, placeholder.name, placeholder.status) == (INTERRUPTED_TEXT, "bash", "error")
    assert INTERRUPTED_TEXT == "[Tool call was interrupted and did not return a result.]"


def test_placeholders_follow_the_offending_message_not_the_end() -> None:
    messages = [HumanMessage("hi"), _ai(_call("bash", "a"), _call("ls", "b")), HumanMessage("still here")]
    patched = patch_messages(messages)
    assert patched is not None and _shape(patched) == ["human", "ai:a,b", "tool:a!", "tool:b!", "human"]


def test_mixed_answered_and_dangling() -> None:
    patched = patch_messages([_ai(_call("bash", "a"), _call("ls", "b")), _result("a")])
    assert patched is not None and _shape(patched) == ["ai:a,b", "tool:a", "tool:b!"]


def test_every_dangling_turn_is_patched() -> None:
    patched = patch_messages([_ai(_call("bash", "a")), HumanMessage("next"), _ai(_call("ls", "b"))])
    assert patched is not None and _shape(patched) == ["ai:a", "tool:a!", "human", "ai:b", "tool:b!"]


def test_raw_provider_calls_count_when_the_structured_views_are_empty() -> None:
    raw = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"command":"ls"}'}}
    patched = patch_messages([_raw_ai(raw)])
    assert patched is not None and len(patched) == 2
    placeholder = patched[1]
    assert isinstance(placeholder, ToolMessage)
    assert (placeholder.tool_call_id, placeholder.name, placeholder.status) == ("call_1", "bash", "error")


def test_raw_calls_shadowed_by_structured_ones_are_not_answered_twice() -> None:
    raw = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    message = _ai(_call("bash", "call_1"), additional_kwargs={"tool_calls": [raw]})
    patched = patch_messages([message])
    assert patched is not None and _shape(patched) == ["ai:call_1", "tool:call_1!"]


# -- results are regrouped, orphans dropped ---------------------------------------------------------------


def test_a_non_adjacent_result_moves_next_to_its_call() -> None:
    patched = patch_messages([_ai(_call("bash", "a")), HumanMessage("interruption"), _result("a")])
    assert patched is not None and _shape(patched) == ["ai:a", "tool:a", "human"]


def test_results_are_regrouped_in_call_order() -> None:
    messages = [_ai(_call("bash", "a"), _call("ls", "b")), HumanMessage("x"), _result("b", "ls"), _result("a")]
    patched = patch_messages(messages)
    assert patched is not None and _shape(patched) == ["ai:a,b", "tool:a", "tool:b", "human"]


def test_results_stay_with_their_own_turn() -> None:
    messages = [_ai(_call("bash", "a")), HumanMessage("x"), _ai(_call("ls", "b")), _result("a"), _result("b", "ls")]
    patched = patch_messages(messages)
    assert patched is not None and _shape(patched) == ["ai:a", "tool:a", "human", "ai:b", "tool:b"]


def test_ids_reused_across_turns_pair_in_order() -> None:
    first, second = _result("call_1", content="first"), _result("call_1", content="second")
    messages = [_ai(_call("bash", "call_1")), HumanMessage("x"), _ai(_call("bash", "call_1")), first, second]
    patched = patch_messages(messages)
    assert patched is not None and _shape(patched) == ["ai:call_1", "tool:call_1", "human", "ai:call_1", "tool:call_1"]
    assert [m.content for m in patched if isinstance(m, ToolMessage)] == ["first", "second"]


def test_orphan_results_are_dropped(caplog: pytest.LogCaptureFixture) -> None:
    messages = [HumanMessage("hi"), _result("gone", "search"), _ai(_call("bash", "a")), _result("a")]
    with caplog.at_level(logging.WARNING, logger="middlewares.dangling_tool_call"):
        patched = patch_messages(messages)
    assert patched is not None and _shape(patched) == ["human", "ai:a", "tool:a"]
    assert "DanglingToolCallMiddleware: 1 orphan(s) dropped, 0 placeholder(s) injected" in caplog.text


# -- invalid calls, blank names, arguments ---------------------------------------------------------------


def test_an_invalid_write_file_call_gets_the_issue_2894_guidance() -> None:
    patched = patch_messages([_ai(invalid_tool_calls=[_invalid(error="Failed to parse tool arguments: bad JSON")])])
    assert patched is not None and _shape(patched) == ["ai:write_file:36", "tool:write_file:36!"]
    placeholder = patched[1]
    assert isinstance(placeholder, ToolMessage) and placeholder.name == "write_file"
    assert placeholder.content == (
        "[write_file failed before execution: the tool-call arguments were not valid JSON, so no file was "
        "written. This often happens when the model tries to write a very large Markdown file in a single tool "
        "call, especially when `content` contains unescaped quotes, inline JSON, backslashes, or code fences. "
        "Do not retry the same large `write_file` payload for this artifact; provide the report/content "
        "directly as normal assistant text in your next response. If a file write is still needed later, split "
        "the file into smaller sections instead of one large payload. Parser error: Failed to parse tool "
        "arguments: bad JSON]"
    )
    assert 'bad {"json"}' not in str(placeholder.content)


def test_an_invalid_write_file_call_without_error_detail() -> None:
    patched = patch_messages([_ai(invalid_tool_calls=[_invalid(error=None)])])
    assert patched is not None
    assert str(patched[1].content).endswith("instead of one large payload.]")


@pytest.mark.parametrize(
    ("error", "text"),
    [
        ("Failed to parse", "[Tool call could not be executed because its arguments were invalid: Failed to parse]"),
        (None, "[Tool call could not be executed because its arguments were invalid.]"),
        ("", "[Tool call could not be executed because its arguments were invalid.]"),
        ("x" * 600, f"[Tool call could not be executed because its arguments were invalid: {'x' * 500}]"),
    ],
)
def test_other_invalid_calls_get_the_generic_text(error: Any, text: str) -> None:
    patched = patch_messages([_ai(invalid_tool_calls=[_invalid(name="search", call_id="search:1", error=error)])])
    assert patched is not None and patched[1].content == text


def test_valid_and_invalid_calls_of_one_message_are_both_answered() -> None:
    patched = patch_messages([_ai(_call("bash", "call_1"), invalid_tool_calls=[_invalid()])])
    assert patched is not None and _shape(patched) == ["ai:call_1,write_file:36", "tool:call_1!", "tool:write_file:36!"]


def test_an_answered_invalid_call_only_has_its_arguments_sanitised() -> None:
    patched = patch_messages([_ai(invalid_tool_calls=[_invalid()]), _result("write_file:36", "write_file")])
    assert patched is not None and _shape(patched) == ["ai:write_file:36", "tool:write_file:36"]
    ai = patched[0]
    assert isinstance(ai, AIMessage) and ai.invalid_tool_calls[0]["args"] == "{}"


@pytest.mark.parametrize("blank", ["", "   ", None])
def test_blank_names_become_unknown_tool(blank: Any) -> None:
    message = AIMessage("", tool_calls=[])
    message.tool_calls = [{"name": blank, "id": "call_1", "args": {}, "type": "tool_call"}]  # type: ignore[typeddict-item]
    patched = patch_messages([message, _result("call_1", name="")])
    assert patched is not None
    ai, result = patched
    assert isinstance(ai, AIMessage) and ai.tool_calls[0]["name"] == "unknown_tool"
    assert isinstance(result, ToolMessage) and result.name == "unknown_tool"
    assert message.tool_calls[0]["name"] == blank, "the original message is never changed"


def test_a_dangling_call_with_a_blank_name_explains_the_name() -> None:
    message = AIMessage("", tool_calls=[])
    message.tool_calls = [{"name": "", "id": "call_1", "args": {}, "type": "tool_call"}]
    patched = patch_messages([message])
    assert patched is not None
    assert (patched[1].content, patched[1].name) == (EMPTY_NAME_TEXT, "unknown_tool")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [('{"command": "ls"}', '{"command": "ls"}'), ("not json", "{}"), ("[1, 2]", "{}"), (None, "{}")],
)
def test_raw_arguments_become_a_json_object_string(arguments: Any, expected: str) -> None:
    raw = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": arguments}}
    patched = patch_messages([_raw_ai(raw), _result("call_1")])
    if arguments == expected:
        assert patched is None
        return
    assert patched is not None
    ai = patched[0]
    assert isinstance(ai, AIMessage) and ai.additional_kwargs["tool_calls"][0]["function"]["arguments"] == expected


def test_a_raw_call_with_a_blank_function_name_is_renamed() -> None:
    raw = {"id": "call_1", "type": "function", "function": {"name": " ", "arguments": "{}"}}
    patched = patch_messages([_raw_ai(raw)])
    assert patched is not None
    ai, placeholder = patched
    assert isinstance(ai, AIMessage) and ai.additional_kwargs["tool_calls"][0]["function"]["name"] == "unknown_tool"
    assert isinstance(placeholder, ToolMessage) and placeholder.content == EMPTY_NAME_TEXT


# -- malformed ids ---------------------------------------------------------------------------------------


def test_a_missing_id_gets_a_synthetic_one_and_keeps_its_result() -> None:
    patched = patch_messages([HumanMessage("hi"), _ai(_call("bash", "")), _result("")])
    assert patched is not None
    assert _shape(patched) == [
        "human",
        "ai:deerflow_synthetic_tool_call_1_call_0",
        "tool:deerflow_synthetic_tool_call_1_call_0",
    ]


def test_a_missing_id_without_result_gets_a_placeholder() -> None:
    patched = patch_messages([_ai(_call("bash", None))])
    assert patched is not None
    assert _shape(patched) == [
        "ai:deerflow_synthetic_tool_call_0_call_0",
        "tool:deerflow_synthetic_tool_call_0_call_0!",
    ]


def test_synthetic_ids_name_their_source() -> None:
    raw = {"id": None, "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    patched = patch_messages([_ai(invalid_tool_calls=[_invalid(call_id="")]), _raw_ai(raw)])
    assert patched is not None
    ids = [m.tool_call_id for m in patched if isinstance(m, ToolMessage)]
    assert ids == ["deerflow_synthetic_tool_call_0_invalid_0", "deerflow_synthetic_tool_call_1_raw_0"]
    raw_ai = patched[2]
    assert isinstance(raw_ai, AIMessage) and raw_ai.additional_kwargs["tool_calls"][0]["id"] == ids[1]


def test_identical_malformed_calls_pair_by_position_when_every_call_has_a_result() -> None:
    messages = [_ai(_call("bash", ""), _call("bash", "")), _result("", content="first"), _result("", content="second")]
    patched = patch_messages(messages)
    assert patched is not None
    results = [m for m in patched if isinstance(m, ToolMessage)]
    assert [(m.tool_call_id, m.content) for m in results] == [
        ("deerflow_synthetic_tool_call_0_call_0", "first"),
        ("deerflow_synthetic_tool_call_0_call_1", "second"),
    ]


def test_an_unattributable_result_is_dropped_rather_than_guessed() -> None:
    # Two identical malformed calls and one result: which call it answers cannot be known.
    patched = patch_messages([_ai(_call("bash", ""), _call("bash", "")), _result("")])
    assert patched is not None
    assert _shape(patched) == [
        "ai:deerflow_synthetic_tool_call_0_call_0,deerflow_synthetic_tool_call_0_call_1",
        "tool:deerflow_synthetic_tool_call_0_call_0!",
        "tool:deerflow_synthetic_tool_call_0_call_1!",
    ]


def test_a_result_name_picks_among_malformed_calls() -> None:
    patched = patch_messages([_ai(_call("bash", ""), _call("ls", "")), _result("", name="ls", content="listing")])
    assert patched is not None
    results = [(m.tool_call_id, m.content, m.status) for m in patched if isinstance(m, ToolMessage)]
    assert results == [
        ("deerflow_synthetic_tool_call_0_call_0", INTERRUPTED_TEXT, "error"),
        ("deerflow_synthetic_tool_call_0_call_1", "listing", "success"),
    ]


def test_a_result_never_answers_an_earlier_turn() -> None:
    messages = [_ai(_call("bash", "")), HumanMessage("x"), _ai(_call("bash", "")), _result("", content="late")]
    patched = patch_messages(messages)
    assert patched is not None
    assert _shape(patched) == [
        "ai:deerflow_synthetic_tool_call_0_call_0",
        "tool:deerflow_synthetic_tool_call_0_call_0!",
        "human",
        "ai:deerflow_synthetic_tool_call_2_call_0",
        "tool:deerflow_synthetic_tool_call_2_call_0",
    ]


def test_the_input_messages_are_never_modified() -> None:
    ai = _ai(_call("bash", ""), invalid_tool_calls=[_invalid()])
    result = _result("")
    before = (ai.model_dump(), result.model_dump())
    assert patch_messages([ai, result]) is not None
    assert (ai.model_dump(), result.model_dump()) == before


# -- on a real run ---------------------------------------------------------------------------------------


async def test_a_dangling_call_is_repaired_in_the_request_only(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    thread = unique("dangling")
    # The state a run cancelled mid-tool leaves behind: the call is committed, its result never arrived.
    dangling = AIMessage("", id="ai-1", tool_calls=[_call("bash", "d1", command="sleep 100")])
    earlier = ThreadState(messages=[HumanMessage("wait a while", id="h-1"), dangling])
    FilesystemThreadStore(config.home).commit(
        ThreadRef(config.user_id, thread), earlier, expected_version=0, run_id="r0"
    )

    async with running_worker(client, config):
        handle = await start_run(
            client, config, "are you done?", model=write_script(home, [answer("yes")]), thread_id=thread
        )
        view = await settle(handle)
        [model_input] = await scheduled_inputs(client, await history_events(handle), MODEL_INVOKE, ModelCallInput)
    assert view.status == "completed"

    sent = model_input.messages
    at = next(i for i, m in enumerate(sent) if isinstance(m, AIMessage) and m.id == "ai-1")
    placeholder = sent[at + 1]
    assert isinstance(placeholder, ToolMessage)
    assert (placeholder.tool_call_id, placeholder.status, placeholder.content) == ("d1", "error", INTERRUPTED_TEXT)

    state = thread_state(home, thread)
    assert not [m for m in state["messages"] if m["type"] == "tool"], "the repair must never reach thread state"
    assert [m["id"] for m in state["messages"][:2]] == ["h-1", "ai-1"]


_IDS = st.sampled_from(["a", "b", "c", ""])
_TRANSCRIPT_PART = st.one_of(
    st.builds(lambda text: HumanMessage(text), st.sampled_from(["hi", "go on"])),
    st.builds(
        lambda ids: _ai(*(_call(call_id=i) for i in ids)) if ids else AIMessage("done"),
        st.lists(_IDS, max_size=2),
    ),
    st.builds(lambda i: _result(i), st.sampled_from(["a", "b", "c", "", "z"])),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_TRANSCRIPT_PART, max_size=10), st.data())
def test_checking_only_what_was_appended_agrees_with_the_full_pass(
    messages: list[BaseMessage], data: st.DataObject
) -> None:
    """The per-run shortcut (only the messages appended to the last well-formed request are checked) repairs
    exactly what the full pass repairs."""
    split = data.draw(st.integers(0, len(messages)))
    middleware = DanglingToolCallMiddleware()
    middleware.repair(messages[:split])
    assert middleware.repair(messages) == patch_messages(messages)
