"""DanglingToolCall's first step (middlewares/_tool_call_ids.py): names, arguments and malformed ids."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from middlewares._tool_call_ids import (
    SYNTHETIC_ID_PREFIX,
    UNKNOWN_TOOL_NAME,
    normalize_arguments,
    normalize_name,
    normalize_tool_call_ids,
)


def test_blank_names_become_unknown_tool() -> None:
    assert normalize_name("  bash ") == "bash"
    assert normalize_name("  ") == UNKNOWN_TOOL_NAME
    assert normalize_name(None) == UNKNOWN_TOOL_NAME


def test_arguments_become_a_json_object_string() -> None:
    assert normalize_arguments({"path": "/x"}) == '{"path": "/x"}'
    assert normalize_arguments('{"a": 1}') == '{"a": 1}'
    assert normalize_arguments("[1, 2]") == "{}", "not an object"
    assert normalize_arguments("{broken") == "{}"
    assert normalize_arguments({"nan": float("nan")}) == "{}", "not valid JSON"


def test_a_well_formed_transcript_is_returned_as_is() -> None:
    messages: list[Any] = [
        HumanMessage("hi", id="h0"),
        AIMessage("", tool_calls=[{"name": "ls", "args": {}, "id": "c1"}], id="a1"),
        ToolMessage("ok", tool_call_id="c1", id="t1"),
    ]
    assert normalize_tool_call_ids(messages) is messages


def test_a_missing_id_gets_a_positional_synthetic_id_and_its_only_result_follows() -> None:
    ai = AIMessage("", tool_calls=[{"name": "ls", "args": {}, "id": ""}], id="a1")
    result = ToolMessage("ok", tool_call_id="", name="ls", id="t1")
    normalized = normalize_tool_call_ids([HumanMessage("hi", id="h0"), ai, result])
    synthetic = f"{SYNTHETIC_ID_PREFIX}1_call_0"
    relabeled_ai, relabeled_result = normalized[1], normalized[2]
    assert isinstance(relabeled_ai, AIMessage) and relabeled_ai.tool_calls[0]["id"] == synthetic
    assert isinstance(relabeled_result, ToolMessage) and relabeled_result.tool_call_id == synthetic


def test_a_result_naming_another_tool_is_not_attributed() -> None:
    ai = AIMessage("", tool_calls=[{"name": "ls", "args": {}, "id": ""}], id="a1")
    result = ToolMessage("ok", tool_call_id="", name="bash", id="t1")
    normalized = normalize_tool_call_ids([ai, result])
    assert isinstance(normalized[1], ToolMessage) and normalized[1].tool_call_id == ""
