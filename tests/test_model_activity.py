"""The ``model.invoke`` activity, model specs, and provider-error → ApplicationError conversion."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatResult
from pydantic import SkipValidation
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import activities.model
from activities.model import ModelActivities
from activities.models import (
    CallCoordinates,
    InvalidModelSpecError,
    ScriptError,
    build_chat_model,
    validate_model_spec,
)
from activities.models.scripted import ScriptedChatModel
from activities.storage.filesystem import FilesystemObjectStore
from activities.transcripts import thread_blob_prefix
from tests.support.kube import eventually_async
from vocabulary.contracts import ModelCallInput, ThreadRef
from vocabulary.transcript import TranscriptCursor

BASH_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}


def write_script(tmp_path: Path, responses: list[dict[str, Any]]) -> Path:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"responses": responses}), encoding="utf-8")
    return path


async def invoke(call: ModelCallInput, attempt: int = 1, env: ActivityEnvironment | None = None) -> AIMessage:
    env = env or ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=attempt)
    return await env.run(ModelActivities().invoke, call)


def call_for(path: Path, **kwargs: Any) -> ModelCallInput:
    return ModelCallInput(model=f"scripted:{path}", messages=[HumanMessage("hi")], **kwargs)


async def test_retryable_error_with_retry_after_then_answer(tmp_path: Path) -> None:
    path = write_script(
        tmp_path,
        [
            {"error": {"status": 503, "message": "server overloaded", "retry_after": 0.5}, "times": 2},
            {"content": "back", "id": "msg-1"},
        ],
    )

    for attempt in (1, 2):
        with pytest.raises(ApplicationError) as caught:
            await invoke(call_for(path), attempt)
        error = caught.value
        assert error.message == "server overloaded"
        assert error.type == "InternalServerError"
        assert not error.non_retryable
        assert error.next_retry_delay == timedelta(seconds=0.5)
        assert error.details == (
            {
                "reason": "transient",
                "retriable": True,
                "attempt": attempt,
                "max_attempts": 3,
                "wait_ms": 500,
                "status": 503,
            },
        )

    message = await invoke(call_for(path), attempt=3)
    assert message.content == "back"
    assert message.id == "msg-1"


async def test_auth_error_is_not_retryable(tmp_path: Path) -> None:
    path = write_script(tmp_path, [{"error": {"status": 401, "message": "invalid api key"}}, {"content": "x"}])

    with pytest.raises(ApplicationError) as caught:
        await invoke(call_for(path))

    assert caught.value.non_retryable
    assert caught.value.type == "AuthenticationError"
    assert caught.value.next_retry_delay is None


async def test_exhausted_script_is_not_retryable(tmp_path: Path) -> None:
    path = write_script(tmp_path, [{"content": "only one"}])

    with pytest.raises(ApplicationError) as caught:
        await invoke(call_for(path, call_index=1))

    assert caught.value.non_retryable
    assert caught.value.type == "ScriptExhaustedError"
    assert "agent call #1 has no entry" in caught.value.message


async def test_invalid_script_is_not_retryable(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"responses": [{"contnet": "typo"}]}', encoding="utf-8")

    with pytest.raises(ApplicationError) as caught:
        await invoke(call_for(path))

    assert caught.value.non_retryable
    assert caught.value.type == "ScriptError"
    assert caught.value.message == f"invalid script {path}: responses[0]: unknown key 'contnet'"


async def test_unknown_spec_is_not_retryable() -> None:
    call = ModelCallInput(model="foo:bar", messages=[HumanMessage("hi")])

    with pytest.raises(ApplicationError) as caught:
        await invoke(call)

    assert caught.value.non_retryable
    assert caught.value.type == "InvalidModelSpecError"
    assert caught.value.message == "unknown model spec 'foo:bar': expected scripted:PATH or openai:MODEL"


async def test_purpose_and_call_index_select_the_entry(tmp_path: Path) -> None:
    path = write_script(
        tmp_path, [{"content": "agent 0"}, {"content": "title 0", "for": "title"}, {"content": "agent 1"}]
    )

    assert (await invoke(call_for(path, purpose="title"))).content == "title 0"
    assert (await invoke(call_for(path, call_index=1))).content == "agent 1"


class RecordingModel(ScriptedChatModel):
    """The scripted model, also keeping what each call received (messages and bound kwargs)."""

    received: SkipValidation[list[tuple[list[BaseMessage], dict[str, Any]]]]
    """Not validated, so it stays the very list the test holds (pydantic would copy it)."""

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.received.append((messages, kwargs))
        return await super()._agenerate(messages, stop, run_manager, **kwargs)


@pytest.fixture
def received(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[BaseMessage], dict[str, Any]]]:
    """Make the activity build :class:`RecordingModel` (same script and coordinates) and return its log."""
    log: list[tuple[list[BaseMessage], dict[str, Any]]] = []

    def build(spec: str, call: CallCoordinates) -> RecordingModel:
        model = build_chat_model(spec, call)
        assert isinstance(model, ScriptedChatModel)
        return RecordingModel(
            script=model.script,
            purpose=model.purpose,
            call_index=model.call_index,
            attempt=model.attempt,
            received=log,
        )

    monkeypatch.setattr(activities.model, "build_chat_model", build)
    return log


async def test_system_message_and_tools_reach_the_model(
    tmp_path: Path, received: list[tuple[list[BaseMessage], dict[str, Any]]]
) -> None:
    path = write_script(tmp_path, [{"tool_calls": [{"name": "bash", "args": {"command": "ls"}}]}])
    system = SystemMessage("You are DeerFlow.")
    history: list[AnyMessage] = [HumanMessage("list files", id="h1")]

    message = await invoke(
        ModelCallInput(model=f"scripted:{path}", messages=history, system_message=system, tools=[BASH_SCHEMA])
    )

    assert message.tool_calls[0]["args"] == {"command": "ls"}
    [(messages, kwargs)] = received
    assert messages == [system, *history]
    assert kwargs["tools"] == [BASH_SCHEMA]
    assert history == [HumanMessage("list files", id="h1")], "the input list must not be mutated"


async def test_no_tools_and_no_system_message_bind_nothing(
    tmp_path: Path, received: list[tuple[list[BaseMessage], dict[str, Any]]]
) -> None:
    path = write_script(tmp_path, [{"content": "plain"}])

    await invoke(call_for(path))

    [(messages, kwargs)] = received
    assert messages == [HumanMessage("hi")]
    assert "tools" not in kwargs


async def test_message_without_id_gets_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class IdlessModel(ScriptedChatModel):
        async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> AIMessage:
            return AIMessage("no id")

    path = write_script(tmp_path, [{"content": "unused"}])
    monkeypatch.setattr(
        activities.model,
        "build_chat_model",
        lambda spec, call: IdlessModel(script=build_chat_model(spec, call).script),  # type: ignore[attr-defined]
    )

    message = await invoke(call_for(path))

    assert message.id is not None
    assert message.id.startswith("run-")


async def test_heartbeats_while_waiting_for_the_model(tmp_path: Path) -> None:
    path = write_script(tmp_path, [{"content": "slow", "delay": 0.35}])
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=0.3))
    beats: list[float] = []
    env.on_heartbeat = lambda *details: beats.append(time.monotonic())

    assert (await invoke(call_for(path), env=env)).content == "slow"

    # Interval is a third of the heartbeat timeout: a beat about every 0.1 s, the first after one interval.
    assert len(beats) >= 3


class GatedStore(FilesystemObjectStore):
    """Message bodies are written only once the test opens the gate."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gate = threading.Event()

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        if "/msg/" in key:
            self.gate.wait(timeout=60)
        super().put(key, data, if_absent=if_absent)


async def test_the_model_is_called_while_the_turns_messages_are_stored_and_the_answer_waits_for_them(
    tmp_path: Path, received: list[tuple[list[BaseMessage], dict[str, Any]]]
) -> None:
    """On S3 a turn's writes are round trips: they go beside the model call, and the answer comes back only once
    they are stored, since the run's next request names them."""
    path = write_script(tmp_path, [{"content": "done"}])
    store = GatedStore(tmp_path / "store")
    ref, _ = TranscriptCursor().reference(ThreadRef("u1", "t1"), [HumanMessage("hi", id="h1")])
    call = ModelCallInput(model=f"scripted:{path}", messages=[], transcript=ref)
    answering = asyncio.create_task(ActivityEnvironment().run(ModelActivities(store=store).invoke, call))

    await eventually_async(lambda: received, what="the model call")
    [(messages, _)] = received
    assert [m.content for m in messages] == ["hi"]
    assert not answering.done(), "the answer came back before its messages were stored"
    store.gate.set()
    assert (await answering).content == "done"
    [body_id] = ref.bodies
    assert store.get(f"{thread_blob_prefix(ref.thread)}msg/{body_id}.json") is not None


def test_validate_model_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_script(tmp_path, [{"content": "ok"}])
    monkeypatch.chdir(tmp_path)

    validate_model_spec("scripted:script.json")
    validate_model_spec("openai:gpt-4o-mini")

    with pytest.raises(InvalidModelSpecError, match=r"^unknown model spec 'foo:bar': expected scripted:PATH"):
        validate_model_spec("foo:bar")
    with pytest.raises(InvalidModelSpecError, match="unknown model spec 'gpt-4o'"):
        validate_model_spec("gpt-4o")
    with pytest.raises(InvalidModelSpecError, match=r"^model spec 'openai:' is missing a model name$"):
        validate_model_spec("openai:")
    with pytest.raises(InvalidModelSpecError, match=r"^model spec 'scripted:' is missing a script path$"):
        validate_model_spec("scripted:")
    with pytest.raises(ScriptError, match=r"^cannot read script .*missing\.json"):
        validate_model_spec("scripted:missing.json")


def test_scripted_spec_resolves_relative_paths_and_rereads_edited_scripts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_script(tmp_path, [{"content": "first"}])
    monkeypatch.chdir(tmp_path)
    call = CallCoordinates(purpose="agent", call_index=0, attempt=1)

    assert build_chat_model("scripted:script.json", call).invoke("hi").content == "first"

    write_script(tmp_path, [{"content": "second"}])
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))

    model = build_chat_model("scripted:script.json", call)
    assert isinstance(model, ScriptedChatModel)
    assert model.script.path == path.resolve()
    assert model.invoke("hi").content == "second"


def test_openai_spec_builds_chat_openai_without_sdk_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("langchain_openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")

    model = build_chat_model("openai:gpt-4o-mini", CallCoordinates(purpose="agent", call_index=0, attempt=1))

    assert type(model).__name__ == "ChatOpenAI"
    assert model.model_name == "gpt-4o-mini"  # type: ignore[attr-defined]
    assert model.max_retries == 0  # type: ignore[attr-defined]


def test_openai_spec_builds_one_model_per_name_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls share the built ``ChatOpenAI`` (building one costs more CPU than a scripted turn's whole model call);
    a changed ``OPENAI_*`` variable is read, as it was when every call built its own."""
    pytest.importorskip("langchain_openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    call = CallCoordinates(purpose="agent", call_index=0, attempt=1)

    first = build_chat_model("openai:gpt-4o-mini", call)
    assert build_chat_model("openai:gpt-4o-mini", CallCoordinates(purpose="title", call_index=3, attempt=2)) is first
    assert build_chat_model("openai:gpt-4o", call) is not first

    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:10/v1")
    moved = build_chat_model("openai:gpt-4o-mini", call)
    assert moved is not first
    assert str(moved.root_async_client.base_url) == "http://127.0.0.1:10/v1/"  # type: ignore[attr-defined]


def test_openai_spec_without_api_key_is_a_spec_error(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("langchain_openai")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    with pytest.raises(InvalidModelSpecError, match=r"^cannot build model 'openai:gpt-4o-mini': .*api_key"):
        build_chat_model("openai:gpt-4o-mini", CallCoordinates(purpose="agent", call_index=0, attempt=1))
