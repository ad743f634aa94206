"""The OpenAI path over real HTTP: runs on the dev server whose model is a ``models:`` entry using langchain-openai's
``ChatOpenAI``, talking to a fake OpenAI-compatible provider (``tests/support/fake_openai.py``).

Covered: tool calls, ``Retry-After`` waited out by Temporal's retry, a 401's auth fallback without retry, a 503
past the budget (transient fallback, counted by the breaker), non-object tool-call arguments as an invalid call,
token usage, DeerFlow's models block through ``hartflow run`` and a ``hartflow worker`` process, and that the
API key reaches the provider but never history, the thread's files or the logs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from middlewares.llm_error_handling import AUTH_TEXT, UNAVAILABLE_TEXT
from tests.support import start_run, thread_state
from tests.support.deerflow_config import deerflow_models
from tests.support.fake_openai import FakeOpenAI, Reply, completion, error_reply, raw_tool_call
from vocabulary.breaker import STATE_QUERY, BreakerState, breaker_workflow_id
from workers.cli import run_command
from workers.config import HartflowConfig, load_config
from workers.devserver import free_port
from workers.models import select_model
from workers.testing import make_config, running_worker, settle, unique
from workers.testing.history import history_events
from workers.testing.processes import worker_process
from workflows.run import RunView

KEY_VARIABLE = "FAKE_PROVIDER_API_KEY"
SECRET = "sk-fake-provider-secret-4f2c9a"


@pytest.fixture
def provider_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_VARIABLE, SECRET)
    return SECRET


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG)
    yield caplog


def provider_config(home: Path, address: str, base_url: str, *, threshold: int = 5, **run: Any) -> HartflowConfig:
    """One ``models:`` entry pointing at the fake provider, with a tiny jitter so retries cost milliseconds."""
    name = unique("fake-gpt")  # one breaker per model name: every test gets its own
    return make_config(
        home,
        address,
        models=[
            {
                "name": name,
                "display_name": "Fake GPT",
                "use": "langchain_openai:ChatOpenAI",
                "model": "fake-gpt-4o",
                "api_key": f"${KEY_VARIABLE}",
                "base_url": base_url,
                "request_timeout": 30,
            }
        ],
        model=name,
        run={
            "middlewares": {
                "llm_error_handling": {
                    "llm_call": {"retry_max_attempts": 3, "retry_base_delay_ms": 5, "retry_cap_delay_ms": 20},
                    "circuit_breaker": {"failure_threshold": threshold},
                }
            },
            **run,
        },
    )


async def run(client: Client, config: HartflowConfig, message: str) -> tuple[RunView, WorkflowHandle[Any, RunView]]:
    chosen = select_model(config)
    handle = await start_run(client, config.model_copy(update={"run": chosen.settings}), message, model=chosen.spec)
    return await settle(handle), handle


def model_attempt(events: list[Any]) -> tuple[Any, Any]:
    """``(scheduled, started)`` of the run's one model.invoke (history keeps the started event of its last attempt)."""
    [scheduled] = [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "model.invoke"
    ]
    [started] = [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id == scheduled.event_id
    ]
    return scheduled, started


def assert_secret_nowhere(events: list[Any], home: Path, logs: pytest.LogCaptureFixture) -> None:
    """The key reached the provider; history (payloads raw, as stored), files and log records never saw it."""
    history = b"".join(event.SerializeToString() for event in events)
    assert SECRET.encode() not in history
    for path in home.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), f"{path} holds the key"
    assert SECRET not in logs.text


def ai_messages(home: Path, handle: WorkflowHandle[Any, Any]) -> list[dict[str, Any]]:
    state = thread_state(home, handle.id.rpartition(":")[2])
    return [m for m in state["messages"] if m["type"] == "ai"]


async def test_a_run_calls_tools_over_http_and_its_usage_reaches_token_usage(
    client: Client, home: Path, temporal_address: str, provider_key: str, logs: pytest.LogCaptureFixture
) -> None:
    replies = [
        completion(tool_calls=[raw_tool_call("bash", '{"command": "echo from-bash"}', "call_1")], usage=(11, 5)),
        completion("the shell said from-bash", usage=(23, 7)),
    ]
    with FakeOpenAI(replies) as provider:
        config = provider_config(home, temporal_address, provider.base_url)
        async with running_worker(client, config):
            view, handle = await run(client, config, "run echo")
            events = await history_events(handle)
        first, second = provider.completions()

    assert (view.status, view.final_message) == ("completed", "the shell said from-bash")
    assert view.usage == {"input_tokens": 34, "output_tokens": 12, "total_tokens": 46}
    assert first.headers["authorization"] == f"Bearer {provider_key}"
    assert first.body["model"] == "fake-gpt-4o"
    assert [tool["function"]["name"] for tool in first.body["tools"]].count("bash") == 1
    tool_reply = next(m for m in second.body["messages"] if m["role"] == "tool")
    assert tool_reply["tool_call_id"] == "call_1" and "from-bash" in tool_reply["content"]
    assert ai_messages(home, handle)[0]["usage_metadata"]["total_tokens"] == 16
    assert_secret_nowhere(events, home, logs)


async def test_retry_after_is_waited_out_by_temporals_retry(
    client: Client, home: Path, temporal_address: str, provider_key: str
) -> None:
    replies = [
        error_reply(429, "Rate limit reached for requests", code="rate_limit_exceeded", headers={"Retry-After": "1"}),
        completion("after the wait"),
    ]
    with FakeOpenAI(replies) as provider:
        config = provider_config(home, temporal_address, provider.base_url)
        async with running_worker(client, config):
            view, handle = await run(client, config, "hello")
            events = await history_events(handle)
            progress = await handle.query("events", 0, result_type=list[dict[str, Any]])
        first, second = provider.completions()
        retries = [e for e in progress if e["kind"] == "llm_retry"]

    assert (view.status, view.final_message) == ("completed", "after the wait")
    scheduled, started = model_attempt(events)
    attributes = started.activity_task_started_event_attributes
    assert attributes.attempt == 2
    assert [(r["attempt"], r["wait_ms"], r["reason"]) for r in retries] == [(1, 1000, "transient")]
    # The jitter is 5-20 ms here: only the header can make the second attempt wait a second.
    waited = started.event_time.ToDatetime() - scheduled.event_time.ToDatetime()
    assert waited >= timedelta(seconds=1), "the second attempt started before the provider's Retry-After"
    assert second.received_at - first.received_at >= 1.0


async def test_a_401_gives_deerflows_auth_fallback_without_retry_and_no_key_in_the_error(
    client: Client, home: Path, temporal_address: str, provider_key: str, logs: pytest.LogCaptureFixture
) -> None:
    # DeepSeek's wording, echoing the key it refused (real providers mask part of it; this fake does not).
    # OpenAI's own "Incorrect API key provided" matches none of DeerFlow's auth patterns (they read the message,
    # not the code), so DeerFlow, and hartflow with it, answer that one with the generic fallback.
    refusal = f"Authentication Fails, Your api key: {provider_key} is invalid"
    replies = [error_reply(401, refusal, code="invalid_api_key")]
    with FakeOpenAI(replies) as provider:
        config = provider_config(home, temporal_address, provider.base_url, threshold=1)
        async with running_worker(client, config):
            view, handle = await run(client, config, "hello")
            events = await history_events(handle)
            breaker = client.get_workflow_handle(breaker_workflow_id(config.model or ""))
        requests = list(provider.completions())

    assert (view.status, view.final_message) == ("error", AUTH_TEXT)
    assert len(requests) == 1, "an auth error is not retried"
    _, started = model_attempt(events)
    assert started.activity_task_started_event_attributes.attempt == 1
    fallback = ai_messages(home, handle)[-1]["additional_kwargs"]
    # langchain-openai (1.7) re-raises the SDK's AuthenticationError as its own OpenAIAuthenticationError.
    assert fallback["error_type"].endswith("AuthenticationError") and fallback["error_reason"] == "auth"
    assert "Authentication Fails, Your api key: *** is invalid" in fallback["error_detail"]
    assert_secret_nowhere(events, home, logs)
    with pytest.raises(RPCError) as missing:
        await breaker.describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND, "non-retriable errors never count towards the breaker"


async def test_a_503_past_the_budget_gives_the_transient_fallback_and_counts_towards_the_breaker(
    client: Client, home: Path, temporal_address: str, provider_key: str
) -> None:
    replies = [error_reply(503, "The server is overloaded or not ready yet.") for _ in range(3)]
    with FakeOpenAI(replies) as provider:
        config = provider_config(home, temporal_address, provider.base_url, threshold=2)
        async with running_worker(client, config):
            view, handle = await run(client, config, "hello")
            events = await history_events(handle)
            breaker = client.get_workflow_handle(breaker_workflow_id(config.model or ""))
            state = await breaker.query(STATE_QUERY, result_type=BreakerState)
        requests = list(provider.completions())

    assert (view.status, view.final_message) == ("error", UNAVAILABLE_TEXT)
    assert len(requests) == 3, "the budget is three attempts, each one HTTP request (SDK retries are off)"
    _, started = model_attempt(events)
    assert started.activity_task_started_event_attributes.attempt == 3
    fallback = ai_messages(home, handle)[-1]["additional_kwargs"]
    assert fallback["error_reason"] == "transient"
    assert fallback["error_type"] in ("InternalServerError", "OpenAIAPIError")  # the SDK's, or langchain's subclass
    assert (state.phase, state.failures) == ("closed", 1), "one exhausted call counted (threshold 2)"


async def test_a_provider_that_refuses_connections_is_retried_as_transient(
    client: Client, home: Path, temporal_address: str, provider_key: str
) -> None:
    config = provider_config(home, temporal_address, f"http://127.0.0.1:{free_port()}/v1")  # nothing listens
    async with running_worker(client, config):
        view, handle = await run(client, config, "hello")
        events = await history_events(handle)

    assert (view.status, view.final_message) == ("error", UNAVAILABLE_TEXT)
    _, started = model_attempt(events)
    assert started.activity_task_started_event_attributes.attempt == 3, "a connection error is transient"
    fallback = ai_messages(home, handle)[-1]["additional_kwargs"]
    assert fallback["error_type"].endswith("ConnectionError") and fallback["error_reason"] == "transient"


async def test_tool_call_arguments_that_are_not_an_object_become_an_invalid_tool_call(
    client: Client, home: Path, temporal_address: str, provider_key: str
) -> None:
    replies: list[Reply] = [
        completion("let me look", tool_calls=[raw_tool_call("bash", json.dumps("ls -la"), "call_bad")]),
        completion("I will pass a JSON object next time"),
    ]
    with FakeOpenAI(replies) as provider:
        config = provider_config(home, temporal_address, provider.base_url)
        async with running_worker(client, config):
            view, handle = await run(client, config, "list files")
        _, second = provider.completions()

    assert (view.status, view.final_message) == ("completed", "I will pass a JSON object next time")
    first_reply = ai_messages(home, handle)[0]
    assert first_reply["content"] == "let me look", "the rest of the reply is kept"
    [invalid] = first_reply["invalid_tool_calls"]
    assert (invalid["id"], invalid["name"], invalid["args"]) == ("call_bad", "bash", '"ls -la"')
    assert "the arguments must be a JSON object, not a string" in invalid["error"]
    answered = next(m for m in second.body["messages"] if m["role"] == "tool")
    assert answered["tool_call_id"] == "call_bad", "the model hears about its bad call"


async def test_deerflows_models_block_runs_through_hartflow_run_and_a_worker_process(
    client: Client,
    home: Path,
    temporal_address: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    for name in [n for n in os.environ if n.startswith(("HARTFLOW_", "TEMPORAL_"))]:
        monkeypatch.delenv(name)
    with FakeOpenAI([completion("hello from gpt-4", usage=(9, 3))]) as provider:
        path = tmp_path / "hartflow.yaml"
        settings = {
            "model": "gpt-4",
            "temporal": {"address": temporal_address, "task_queue": unique("tq")},
            "storage": {"home": str(home)},
        }
        path.write_text(yaml.safe_dump(settings) + deerflow_models(provider.base_url))
        config = load_config(path, environ={})
        with worker_process(config, tmp_path / "worker.yaml") as worker:
            code = await asyncio.to_thread(run_command, ["run", "hi", "--config", str(path), "--json"])
            out = capsys.readouterr().out
            payload = json.loads(out)
            handle = client.get_workflow_handle(payload["workflow_id"])
            chain = await handle.query("chain", result_type=list[str])
            events = await history_events(handle)
            worker.terminate()
            worker.wait()
        [request] = provider.completions()

    assert code == 0 and payload["final_message"] == "hello from gpt-4"
    assert (request.body["model"], request.body["temperature"]) == ("gpt-4", 0.7)
    assert "context_window" not in request.body and "supports_vision" not in request.body
    assert request.headers["authorization"] == f"Bearer {SECRET}"
    assert "ViewImage" in chain, "supports_vision: true brings ViewImage, as in DeerFlow"
    history = b"".join(event.SerializeToString() for event in events)
    assert SECRET.encode() not in history
    worker_log = (tmp_path / "worker.log").read_text()
    assert SECRET not in worker_log
