"""A generic LangGraph client works on hartflow (issue 27), with the requests LangChain's Agent Chat UI sends
(``langchain-ai/agent-chat-ui``: ``src/providers/Stream.tsx``, ``src/providers/Thread.tsx``,
``src/components/thread/index.tsx``, ``src/components/thread/messages/ai.tsx``, ``src/app/api/[..._path]/route.ts``):
CORS for a page on another origin, JSON bodies whatever their ``Content-Type`` (the app's ``/api`` proxy), threads
found by ``graph_id``, no internal message served, a clarification readable as an interrupt and its typed reply
shown as typed, and the reason of a failed run in the stream's ``error`` frame.

Real uvicorn, real Temporal, real storage, ``langgraph-sdk``; the model is scripted."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from pydantic import ValidationError
from temporalio.client import Client
from temporalio.exceptions import ActivityError, ApplicationError

from activities.thread_store import ObjectThreadStore
from tests.support import model_specs, worker_and_api
from vocabulary.contracts import ThreadRef
from workers.api.served import error_frame, redacted
from workers.api_settings import ApiSettings
from workers.config import HartflowConfig, open_object_store
from workers.testing import answer, calls, make_config, serving_api, tool_call, unique, write_script
from workflows.run.fields import RunFields
from workflows.run.view import run_error

APP = "http://localhost:3000"
"""Agent Chat UI's dev server (``pnpm dev``), the page that calls the server when it is the Deployment URL."""
ALLOWED = "https://chat.example.com"
EVIL = "https://evil.example"
KEY = "sk-proj-Abcdefghijklmnop0123456789"


def user(text: str) -> dict[str, Any]:
    """The message Agent Chat UI submits (``src/components/thread/index.tsx`` ``handleSubmit``)."""
    return {"id": unique("msg"), "type": "human", "content": [{"type": "text", "text": text}]}


@pytest.fixture
def scripts(tmp_path: Path) -> dict[str, str]:
    ask = {"question": "Which colour?", "clarification_type": "approach_choice", "options": ["red", "blue"]}
    rejected = {"error": {"status": 401, "message": f"Incorrect API key provided: {KEY}"}, "times": 1}
    return {
        "default": write_script(tmp_path, [answer("first answer")]),
        "ask": write_script(tmp_path, [calls(tool_call("ask_clarification", unique("call"), **ask)), answer("ok")]),
        "fails": write_script(tmp_path, [rejected]),
    }


@pytest.fixture
def api_config(home: Path, temporal_address: str, scripts: dict[str, str], tmp_path: Path) -> HartflowConfig:
    api = model_specs(tmp_path, max_body_bytes=4096)
    return make_config(home, temporal_address, model=scripts["default"], api=api)


@pytest.fixture
async def url(api_config: HartflowConfig, client: Client) -> AsyncIterator[str]:
    async with worker_and_api(api_config, client) as base:
        yield base


def preflight(origin: str, method: str = "POST") -> dict[str, str]:
    """What a browser sends before the SDK's ``fetch`` with a JSON body and ``X-Api-Key`` (``Stream.tsx``)."""
    return {
        "Origin": origin,
        "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "content-type,x-api-key,x-auth-scheme",
    }


async def test_a_loopback_page_is_allowed_and_another_site_is_not(url: str) -> None:
    async with httpx.AsyncClient(base_url=url) as api:
        allowed = await api.options("/threads/search", headers=preflight(APP))
        assert allowed.status_code == 200, allowed.text
        assert allowed.headers["access-control-allow-origin"] == APP
        assert "x-api-key" in allowed.headers["access-control-allow-headers"].lower()
        refused = await api.options("/threads/search", headers=preflight(EVIL))
        assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers

        info = await api.get("/info", headers={"Origin": APP})  # Stream.tsx checkGraphStatus
        assert info.status_code == 200 and info.headers["access-control-allow-origin"] == APP
        thread = (await api.post("/threads", json={}, headers={"Origin": APP})).json()
        run = await api.post(
            f"/threads/{thread['thread_id']}/runs/stream",
            json={"assistant_id": "hartflow", "input": {"messages": [user("hi")]}, "stream_mode": ["values"]},
            headers={"Origin": APP},
        )
        assert run.status_code == 200 and run.headers["access-control-allow-origin"] == APP
        exposed = run.headers["access-control-expose-headers"].lower()
        assert "content-location" in exposed  # the SDK reads the run id from it
        assert run.headers["content-location"].endswith(
            f"/runs/{json.loads(run.text.split('data: ')[1].split()[0])['run_id']}"
        )
        assert (await api.post("/threads", json={}, headers={"Origin": EVIL})).status_code == 403


async def test_an_origin_the_operator_allows_may_call_and_write(
    home: Path, temporal_address: str, client: Client
) -> None:
    config = make_config(home, temporal_address, api={"cors_origins": [ALLOWED]})
    async with serving_api(config, client) as base, httpx.AsyncClient(base_url=base) as api:
        allowed = await api.options("/threads", headers=preflight(ALLOWED))
        assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == ALLOWED
        created = await api.post("/threads", json={}, headers={"Origin": ALLOWED})
        assert created.status_code == 200 and created.headers["access-control-allow-origin"] == ALLOWED
        # Listed origins replace the loopback default for reading; loopback pages may still write, as before.
        assert (await api.options("/threads", headers=preflight(APP))).status_code == 400
        assert (await api.post("/threads", json={}, headers={"Origin": APP})).status_code == 200
        assert (await api.post("/threads", json={}, headers={"Origin": EVIL})).status_code == 403


async def test_a_body_without_a_json_content_type_is_read_as_json(url: str) -> None:
    """Agent Chat UI's ``/api`` passthrough (``src/app/api/[..._path]/route.ts``) forwards the body as a string:
    no ``Content-Type``, or ``text/plain`` as ``fetch`` labels a string."""
    async with httpx.AsyncClient(base_url=url) as api:
        tag = unique("k")
        bare = await api.post("/api/threads", content=json.dumps({"metadata": {"k": tag}}).encode())
        assert bare.status_code == 200, bare.text
        assert bare.json()["metadata"] == {"k": tag}
        plain = await api.post(
            "/api/threads/search",
            content=json.dumps({"metadata": {"k": tag}}),
            headers={"Content-Type": "text/plain;charset=UTF-8"},
        )
        assert plain.status_code == 200 and [t["thread_id"] for t in plain.json()] == [bare.json()["thread_id"]]
        before = await api.post("/threads/search", json={"limit": 1000})
        not_json = await api.post("/api/threads", content=b"metadata=1", headers={"Content-Type": "text/plain"})
        assert not_json.status_code == 422
        too_big = await api.post("/api/threads", content=json.dumps({"metadata": {"x": "y" * 5000}}).encode())
        assert too_big.status_code == 413
        assert len((await api.post("/threads/search", json={"limit": 1000})).json()) == len(before.json())


async def test_threads_are_found_by_graph_id_once_a_run_started(url: str) -> None:
    """``src/providers/Thread.tsx``: ``threads.search({metadata: {graph_id: assistantId}})`` (or ``assistant_id``
    for a uuid) fills the history sidebar."""
    sdk = get_client(url=url)
    thread_id = (await sdk.threads.create(metadata={"k": "v"}))["thread_id"]
    assert "graph_id" not in (await sdk.threads.get(thread_id))["metadata"]
    await sdk.runs.wait(thread_id, "hartflow", input={"messages": [user("hello")]})
    metadata = (await sdk.threads.get(thread_id))["metadata"]
    assert metadata == {"k": "v", "graph_id": "hartflow", "assistant_id": "hartflow"}
    found = await sdk.threads.search(metadata={"graph_id": "hartflow"}, limit=100)
    assert thread_id in [t["thread_id"] for t in found]
    assert thread_id in [t["thread_id"] for t in await sdk.threads.search(metadata={"assistant_id": "hartflow"})]
    assert thread_id not in [t["thread_id"] for t in await sdk.threads.search(metadata={"graph_id": "lead_agent"})]


def hidden(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if (m.get("additional_kwargs") or {}).get("hide_from_ui")]


async def test_no_internal_message_is_served_and_the_first_message_is_the_users(
    url: str, api_config: HartflowConfig
) -> None:
    """What the thread view (``src/components/thread/index.tsx``) and the sidebar title
    (``src/components/thread/history/index.tsx``: ``values.messages[0]``) show."""
    sdk = get_client(url=url)
    thread_id = (await sdk.threads.create())["thread_id"]
    sent = user("what day is it?")
    parts = [
        part
        async for part in sdk.runs.stream(
            thread_id, "hartflow", input={"messages": [sent]}, stream_mode=["values", "messages-tuple", "updates"]
        )
    ]
    state = ObjectThreadStore(open_object_store(api_config)).record(ThreadRef("default", thread_id))
    assert state is not None and hidden(state["state"]["messages"]), "DynamicContext's reminder is in the state"
    for values in [p.data for p in parts if p.event == "values"] + [
        (await sdk.threads.get_state(thread_id))["values"],
        (await sdk.threads.get(thread_id))["values"],
        *[h["values"] for h in await sdk.threads.get_history(thread_id)],
    ]:
        assert not hidden(values["messages"]) and "<system-reminder>" not in json.dumps(values)
    first = await sdk.threads.search(metadata={"graph_id": "hartflow"}, limit=100)
    (listed,) = [t for t in first if t["thread_id"] == thread_id]
    assert listed["values"]["messages"][0]["type"] == "human"
    assert listed["values"]["messages"][0]["content"] == "what day is it?"
    assert listed["values"]["messages"][0]["id"] == f"{sent['id']}__user"  # DeerFlow's app matches it to the id sent
    tuples = [p.data[0] for p in parts if p.event == "messages"]
    assert tuples and not hidden(tuples)


async def test_a_clarification_reads_as_a_question_and_the_typed_reply_shows_as_typed(
    url: str, scripts: dict[str, str], api_config: HartflowConfig
) -> None:
    """``src/components/thread/messages/generic-interrupt.tsx`` shows the interrupt value's keys; the user then
    types the answer into the composer (``handleSubmit``)."""
    sdk = get_client(url=url)
    thread_id = (await sdk.threads.create())["thread_id"]
    context = {"model_name": scripts["ask"]}
    paused = await sdk.runs.wait(thread_id, "hartflow", input={"messages": [user("paint it")]}, context=context)
    (interrupt,) = paused["__interrupt__"]
    value = interrupt["value"]
    assert list(value) == ["question", "options", "human_input_request"]
    assert value["question"] == "Which colour?" and value["options"] == ["red", "blue"]
    assert value["human_input_request"]["kind"] == "human_input_request"
    assert (await sdk.threads.get(thread_id))["interrupts"][interrupt["id"]][0]["value"] == value

    final = await sdk.runs.wait(thread_id, "hartflow", input={"messages": [user("blue")]})
    humans = [m for m in final["messages"] if m["type"] == "human"]
    assert [m["content"] for m in humans][-1] == "blue"  # as typed, where a generic UI shows it
    assert humans[-1]["additional_kwargs"]["human_input_response"]["value"] == "blue"  # DeerFlow's app reads this
    state = ObjectThreadStore(open_object_store(api_config)).record(ThreadRef("default", thread_id))
    assert state is not None
    stored = [m for m in state["state"]["messages"] if m["id"] == humans[-1]["id"]]
    assert stored[0]["content"] == 'For your clarification "Which colour?", my answer is: blue'  # what the model read


async def test_a_failed_runs_error_frame_says_why_without_the_key(url: str, scripts: dict[str, str]) -> None:
    """The ``error`` frame becomes ``stream.error``, whose message Agent Chat UI toasts
    (``src/components/thread/index.tsx``)."""
    sdk = get_client(url=url)
    thread_id = (await sdk.threads.create())["thread_id"]
    context = {"model_name": scripts["fails"]}
    parts = [
        part
        async for part in sdk.runs.stream(
            thread_id, "hartflow", input={"messages": [user("hi")]}, context=context, stream_mode=["values", "custom"]
        )
    ]
    (error,) = [p.data for p in parts if p.event == "error"]
    assert error["error"] == "AuthenticationError"
    assert "Incorrect API key provided: [redacted]" in error["message"] and KEY not in error["message"]
    (finished,) = [p.data for p in parts if p.event == "custom" and p.data["kind"] == "run_finished"]
    assert finished["error"]["type"] == "AuthenticationError"
    assert "[redacted]" in finished["error"]["message"] and KEY not in json.dumps(finished)
    with pytest.raises(Exception, match="AuthenticationError") as raised:  # the SDK raises runs.wait's __error__
        await sdk.runs.wait(thread_id, "hartflow", input={"messages": [user("again")]}, context=context)
    assert "[redacted]" in str(raised.value) and KEY not in str(raised.value)


def test_a_failed_runs_error_is_its_root_cause_and_keys_are_redacted() -> None:
    """The other path to the ``error`` frame: a run that failed (not DeerFlow's fallback answer) records the root
    cause of its failure; the frame redacts what looks like a credential."""
    failure = ActivityError(
        "activity failed",
        scheduled_event_id=1,
        started_event_id=2,
        identity="w",
        activity_type="model.invoke",
        activity_id="1",
        retry_state=None,
    )
    failure.__cause__ = ApplicationError("provider said: Bearer abcdefgh12345678", type="BadRequestError")
    recorded = run_error(RunFields(), "error", failure)
    assert recorded == {"error": {"type": "BadRequestError", "message": "provider said: Bearer abcdefgh12345678"}}
    assert error_frame("r1", recorded["error"]) == {"error": "BadRequestError", "message": "provider said: [redacted]"}
    assert run_error(RunFields(), "completed", None) == {} and run_error(RunFields(), "cancelled", failure) == {}
    assert error_frame("r1", None) == {"error": "RunFailed", "message": "run r1 failed"}
    assert redacted(f'{{"api_key": "{KEY[3:]}"}} and {KEY}') == '{"[redacted]"} and [redacted]'


def test_cors_origins_are_checked_when_the_config_loads() -> None:
    assert ApiSettings(cors_origins=["https://Chat.Example.com/"]).cors_origins == ["https://chat.example.com"]
    assert ApiSettings(auth="bearer", tokens=[{"user_id": "a", "token_sha256": "0" * 64}], cors_origins=["*"])
    for origins, problem in (
        (["*"], "needs auth bearer or jwt"),
        (["https://chat.example.com/app"], "is not an origin"),
        (["chat.example.com"], "is not an origin"),
    ):
        with pytest.raises(ValidationError, match=problem):
            ApiSettings(cors_origins=origins)
