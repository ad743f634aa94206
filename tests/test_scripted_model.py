"""The scripted chat model: its file format, call/attempt addressing, and validation messages."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import tool

from activities.models.provider_errors import (
    AuthenticationError,
    InternalServerError,
    RateLimitError,
    ScriptedProviderError,
    provider_error_class,
)
from activities.models.script import Script, ScriptExhaustedError
from activities.models.script_file import ScriptError, load_script
from activities.models.scripted import ScriptedChatModel
from vocabulary.contracts import ModelPurpose

DOCUMENTED_SCRIPT: dict[str, Any] = {
    "responses": [
        {
            "content": "…",
            "tool_calls": [{"name": "bash", "args": {"command": "echo hi"}, "id": "call_1"}],
            "response_metadata": {"finish_reason": "tool_calls"},
            "usage_metadata": {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17},
            "delay": 0.0,
            "for": "agent",
        },
        {
            "error": {
                "status": 503,
                "message": "server overloaded",
                "type": "InternalServerError",
                "retry_after": 0.5,
            },
            "times": 2,
        },
    ]
}


def write_script(tmp_path: Path, data: Any, name: str = "script.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def model_for(
    script: Script, purpose: ModelPurpose = "agent", call_index: int = 0, attempt: int = 1
) -> ScriptedChatModel:
    return ScriptedChatModel(script=script, purpose=purpose, call_index=call_index, attempt=attempt)


async def answer(script: Script, purpose: ModelPurpose = "agent", call_index: int = 0, attempt: int = 1) -> AIMessage:
    return await model_for(script, purpose, call_index, attempt).ainvoke([HumanMessage("hi")])


async def test_documented_format_round_trips_into_ai_messages(tmp_path: Path) -> None:
    script = load_script(write_script(tmp_path, DOCUMENTED_SCRIPT))

    message = await answer(script)

    assert message.content == "…"
    assert message.tool_calls == [{"name": "bash", "args": {"command": "echo hi"}, "id": "call_1", "type": "tool_call"}]
    assert message.usage_metadata == {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17}
    assert message.response_metadata["finish_reason"] == "tool_calls"

    for attempt in (1, 2):
        with pytest.raises(InternalServerError) as caught:
            await answer(script, call_index=1, attempt=attempt)
        error = caught.value
        assert str(error) == error.message == "server overloaded"
        assert error.status_code == 503
        assert error.retry_after == 0.5
        assert error.headers == {"retry-after": "0.5"}
    # The error group has no response after it: the third attempt has nothing left to answer with.
    with pytest.raises(ScriptExhaustedError, match="attempt 3"):
        await answer(script, call_index=1, attempt=3)


async def test_optional_response_fields(tmp_path: Path) -> None:
    script = load_script(
        write_script(
            tmp_path,
            {
                "responses": [
                    {
                        "content": [{"type": "text", "text": "see"}, "plain"],
                        "tool_calls": [{"name": "ls"}, {"name": "read", "args": {"path": "/a"}}],
                        "invalid_tool_calls": [{"name": "bad", "args": "{oops", "id": "x", "error": "bad json"}],
                        "additional_kwargs": {"reasoning_content": "hmm"},
                        "usage_metadata": {"input_tokens": 3, "output_tokens": 4},
                        "id": "msg-7",
                    }
                ]
            },
        )
    )

    message = await answer(script)

    assert message.content == [{"type": "text", "text": "see"}, "plain"]
    assert [(c["name"], c["args"], c["id"]) for c in message.tool_calls] == [
        ("ls", {}, "call_agent_0_0"),
        ("read", {"path": "/a"}, "call_agent_0_1"),
    ]
    assert [(c["name"], c["args"], c["error"]) for c in message.invalid_tool_calls] == [("bad", "{oops", "bad json")]
    assert message.additional_kwargs == {"reasoning_content": "hmm"}
    assert message.usage_metadata is not None
    assert message.usage_metadata["total_tokens"] == 7
    assert message.id == "msg-7"


async def test_answers_do_not_share_state_with_the_cached_script(tmp_path: Path) -> None:
    script = load_script(
        write_script(tmp_path, {"responses": [{"tool_calls": [{"name": "bash", "args": {"command": "ls"}}]}]})
    )

    first = await answer(script)
    first.tool_calls[0]["args"]["command"] = "rm -rf /"

    assert (await answer(script)).tool_calls[0]["args"] == {"command": "ls"}


async def test_entries_are_consumed_in_order_per_purpose(tmp_path: Path) -> None:
    script = load_script(
        write_script(
            tmp_path,
            {
                "responses": [
                    {"content": "agent 0"},
                    {"content": "title 0", "for": "title"},
                    {"error": {"status": 500, "message": "boom"}, "for": "memory"},
                    {"content": "agent 1", "for": "agent"},
                    {"content": "memory 0", "for": "memory"},
                    {"content": "summary 0", "for": "summarization"},
                    {"content": "title 1", "for": "title"},
                ]
            },
        )
    )

    assert (await answer(script, "agent", 0)).content == "agent 0"
    assert (await answer(script, "agent", 1)).content == "agent 1"
    assert (await answer(script, "title", 0)).content == "title 0"
    assert (await answer(script, "title", 1)).content == "title 1"
    assert (await answer(script, "summarization", 0)).content == "summary 0"
    # The memory error belongs to memory call 0, not to the agent call listed after it.
    with pytest.raises(InternalServerError):
        await answer(script, "memory", 0, attempt=1)
    assert (await answer(script, "memory", 0, attempt=2)).content == "memory 0"
    # Same coordinates, same answer: a replayed or retried call cannot drift.
    assert (await answer(script, "agent", 1)).content == "agent 1"


async def test_error_times_cover_consecutive_attempts(tmp_path: Path) -> None:
    script = load_script(
        write_script(
            tmp_path,
            {
                "responses": [
                    {"error": {"status": 429, "message": "slow down"}, "times": 2},
                    {"error": {"status": 401, "message": "bad key"}},
                    {"content": "finally"},
                    {"content": "next call"},
                ]
            },
        )
    )

    for attempt in (1, 2):
        with pytest.raises(RateLimitError, match="slow down"):
            await answer(script, attempt=attempt)
    with pytest.raises(AuthenticationError, match="bad key"):
        await answer(script, attempt=3)
    assert (await answer(script, attempt=4)).content == "finally"
    assert (await answer(script, attempt=9)).content == "finally"
    assert (await answer(script, call_index=1)).content == "next call"


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (429, "RateLimitError"),
        (401, "AuthenticationError"),
        (403, "PermissionDeniedError"),
        (500, "InternalServerError"),
        (503, "InternalServerError"),
        (400, "APIStatusError"),
        (404, "APIStatusError"),
    ],
)
async def test_error_class_defaults_from_status(tmp_path: Path, status: int, expected: str) -> None:
    script = load_script(write_script(tmp_path, {"responses": [{"error": {"status": status, "message": "x"}}]}))

    with pytest.raises(ScriptedProviderError) as caught:
        await answer(script)

    assert type(caught.value).__name__ == expected
    assert caught.value.status_code == status
    assert caught.value.retry_after is None
    assert caught.value.headers == {}


async def test_error_type_can_name_any_sdk_class(tmp_path: Path) -> None:
    script = load_script(
        write_script(
            tmp_path,
            {
                "responses": [
                    {"error": {"type": "APITimeoutError", "message": "Request timed out."}},
                    {
                        "error": {
                            "type": "RateLimitError",
                            "status": 429,
                            "message": "q",
                            "code": "insufficient_quota",
                        }
                    },
                ]
            },
        )
    )

    with pytest.raises(ScriptedProviderError) as timeout:
        await answer(script, attempt=1)
    with pytest.raises(RateLimitError) as quota:
        await answer(script, attempt=2)

    assert type(timeout.value) is provider_error_class("APITimeoutError")
    assert timeout.value.status_code is None
    assert quota.value.code == "insufficient_quota"
    assert quota.value.body == {"error": {"message": "q", "code": "insufficient_quota"}}


async def test_delay_sleeps_before_answering_and_before_failing(tmp_path: Path) -> None:
    script = load_script(
        write_script(
            tmp_path,
            {
                "responses": [
                    {"error": {"status": 503, "message": "slow failure"}, "delay": 0.2},
                    {"content": "slow answer", "delay": 0.2},
                ]
            },
        )
    )
    loop = asyncio.get_running_loop()

    started = loop.time()
    with pytest.raises(InternalServerError):
        await answer(script, attempt=1)
    assert loop.time() - started >= 0.2

    started = loop.time()
    assert (await answer(script, attempt=2)).content == "slow answer"
    assert loop.time() - started >= 0.2


async def test_wait_for_file_holds_the_call_until_the_file_exists(tmp_path: Path) -> None:
    gate, fail_gate = tmp_path / "gate", tmp_path / "fail-gate"
    script = load_script(
        write_script(
            tmp_path,
            {
                "responses": [
                    {"error": {"status": 503, "message": "held failure"}, "wait_for_file": str(fail_gate)},
                    {"content": "held answer", "wait_for_file": str(gate)},
                ]
            },
        )
    )
    failing = asyncio.create_task(answer(script, attempt=1))
    answering = asyncio.create_task(answer(script, attempt=2))
    for _ in range(20):  # each call gets the loop many times; without its file it cannot finish
        await asyncio.sleep(0)
    assert not failing.done() and not answering.done()

    fail_gate.touch()
    with pytest.raises(InternalServerError):
        await failing
    assert not answering.done()
    gate.touch()
    assert (await answering).content == "held answer"


async def test_exhausted_script(tmp_path: Path) -> None:
    script = load_script(write_script(tmp_path, {"responses": [{"content": "only one"}]}))

    with pytest.raises(ScriptExhaustedError, match=r"agent call #1 has no entry"):
        await answer(script, call_index=1)
    with pytest.raises(ScriptExhaustedError, match=r"title call #0"):
        await answer(script, "title")


def test_sync_invoke_uses_the_same_script(tmp_path: Path) -> None:
    script = load_script(write_script(tmp_path, DOCUMENTED_SCRIPT))

    assert model_for(script).invoke("hi").tool_calls[0]["id"] == "call_1"
    with pytest.raises(InternalServerError):
        model_for(script, call_index=1).invoke("hi")


@tool
def bash(command: str) -> str:
    """Run a shell command."""
    return command


READ_FILE_SCHEMA = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}


class RecordingScriptedChatModel(ScriptedChatModel):
    """Records what reached the model, to check the bound tools really are passed to each call."""

    calls: list[tuple[list[BaseMessage], dict[str, Any]]]

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls.append((messages, kwargs))
        return await super()._agenerate(messages, stop, run_manager, **kwargs)


async def test_bind_tools_passes_openai_schemas_and_returns_tool_calls(tmp_path: Path) -> None:
    script = load_script(write_script(tmp_path, DOCUMENTED_SCRIPT))
    model = RecordingScriptedChatModel(script=script, calls=[])

    message = await model.bind_tools([bash, READ_FILE_SCHEMA], tool_choice="auto").ainvoke("run it")

    assert message.tool_calls[0]["name"] == "bash"
    [(_, kwargs)] = model.calls
    assert kwargs["tool_choice"] == "auto"
    assert [schema["function"]["name"] for schema in kwargs["tools"]] == ["bash", "read_file"]
    assert kwargs["tools"][0]["function"]["parameters"]["properties"] == {"command": {"type": "string"}}
    assert kwargs["tools"][1] == READ_FILE_SCHEMA


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    with pytest.raises(ScriptError, match=r"^cannot read script .*nope\.json: No such file or directory$"):
        load_script(path)


MALFORMED: list[tuple[Any, str]] = [
    ("{not json", "not valid JSON: Expecting property name"),
    ([], "the top level must be an object with a 'responses' list"),
    ({}, "missing key 'responses'"),
    ({"responses": [], "extra": 1}, "unknown top-level key 'extra'"),
    ({"responses": {}}, "'responses' must be a list"),
    ({"responses": [{"content": "ok"}, "text"]}, "responses[1]: an entry must be an object"),
    ({"responses": [{"content": "ok"}, {"contnet": "typo"}]}, "responses[1]: unknown key 'contnet'"),
    (
        {"responses": [{"content": "ok", "for": "planner"}]},
        "responses[0].for: Input should be 'agent', 'title'",
    ),
    (
        {"responses": [{"error": {"status": 500, "message": "x"}, "times": 0}]},
        "responses[0].times: Input should be",
    ),
    (
        {"responses": [{"error": {"status": 500, "message": "x"}, "times": "2"}]},
        "responses[0].times: Input should",
    ),
    ({"responses": [{"tool_calls": {"name": "bash"}}]}, "responses[0].tool_calls: must be a list"),
    (
        {"responses": [{"tool_calls": [{"name": "bash", "args": "ls"}]}]},
        "responses[0].tool_calls[0].args: must be an",
    ),
    ({"responses": [{"tool_calls": [{"args": {}}]}]}, "responses[0].tool_calls[0]: missing key 'name'"),
    (
        {"responses": [{"tool_calls": [{"name": "a", "argz": {}}]}]},
        "responses[0].tool_calls[0]: unknown key 'argz'",
    ),
    (
        {"responses": [{"response_metadata": {}}]},
        "responses[0]: entry needs 'content', 'tool_calls' or 'error'",
    ),
    ({"responses": [{"content": 42}]}, "responses[0].content: must be a string or a list of content blocks"),
    (
        {"responses": [{"content": "x", "delay": -1}]},
        "responses[0].delay: Input should be greater than or equal",
    ),
    ({"responses": [{"content": "x", "usage_metadata": {"input_tokens": 1}}]}, "missing key 'output_tokens'"),
    ({"responses": [{"error": {"message": "x"}}]}, "responses[0].error: error needs 'status' or 'type'"),
    ({"responses": [{"error": {"status": 500}}]}, "responses[0].error: missing key 'message'"),
    ({"responses": [{"error": "boom"}]}, "responses[0].error: must be an object"),
    (
        {"responses": [{"error": {"status": 500, "message": "x"}, "content": "y"}]},
        "responses[0]: unknown key 'content'",
    ),
    (
        {"responses": [{"error": {"status": 500, "message": "x", "type": "Not A Class"}}]},
        "responses[0].error.type:",
    ),
]


@pytest.mark.parametrize(("data", "expected"), MALFORMED)
def test_malformed_script_gives_one_line_error_naming_entry(tmp_path: Path, data: Any, expected: str) -> None:
    path = write_script(tmp_path, data)

    with pytest.raises(ScriptError) as caught:
        load_script(path)

    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"invalid script {path}: ")
    assert expected in message
