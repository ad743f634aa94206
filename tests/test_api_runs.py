"""The Agent Server API through the official ``langgraph-sdk`` client on a real uvicorn (loopback): discovery, threads,
streamed runs, wait, history, clarification as an interrupt and its resume, busy threads, cancel, bad input.
Durable streams (rejoin, reconnect, restart, replicas) are in ``test_api_streams.py``."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import BadRequestError, ConflictError, NotFoundError, UnprocessableEntityError
from temporalio.client import Client

from tests.support import model_specs, worker_and_api
from vocabulary.workflow_ids import run_workflow_id
from workers.config import HartflowConfig, open_object_store
from workers.testing import answer, calls, make_config, running_worker, serving_api, tool_call, unique, write_script
from workers.worker import connect

MODES = ["values", "messages-tuple", "updates", "custom"]


def ask(question: str, options: list[str]) -> dict[str, Any]:
    args = {"question": question, "clarification_type": "approach_choice", "options": options}
    return calls(tool_call("ask_clarification", unique("call"), **args))


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


@pytest.fixture
def scripts(tmp_path: Path) -> dict[str, str]:
    """The server's default model answers at once; ``ask`` pauses on a question, then answers the reply. A run
    picks ``ask`` by its spec (``api.allow_model_specs`` is on for this server)."""
    return {
        "default": write_script(tmp_path, [answer("first answer")]),
        "ask": write_script(tmp_path, [ask("Which colour?", ["red", "blue"]), answer("blue it is")]),
    }


@pytest.fixture
def api_config(home: Path, temporal_address: str, scripts: dict[str, str], tmp_path: Path) -> HartflowConfig:
    return make_config(home, temporal_address, model=scripts["default"], api=model_specs(tmp_path))


@pytest.fixture
async def url(api_config: HartflowConfig, client: Client) -> AsyncIterator[str]:
    async with worker_and_api(api_config, client) as base:
        yield base


async def collect(parts: AsyncIterator[Any]) -> list[Any]:
    return [part async for part in parts]


def message_ids(values: dict[str, Any]) -> list[str]:
    return [message["id"] for message in values.get("messages", [])]


async def test_discovery_and_thread_crud_and_search(url: str) -> None:
    sdk = get_client(url=url)
    found = await sdk.assistants.search()
    assert {a["assistant_id"] for a in found} >= {"hartflow", "lead_agent"}
    assert (await sdk.assistants.get("lead_agent"))["graph_id"] == "lead_agent"
    with pytest.raises(NotFoundError):
        await sdk.assistants.get("nope")

    tag = unique("k")
    thread = await sdk.threads.create(metadata={"k": tag})
    assert thread["status"] == "idle" and thread["metadata"] == {"k": tag}
    assert (await sdk.threads.get(thread["thread_id"]))["metadata"] == {"k": tag}
    with pytest.raises(ConflictError):
        await sdk.threads.create(thread_id=thread["thread_id"], if_exists="raise")
    same = await sdk.threads.create(thread_id=thread["thread_id"], if_exists="do_nothing")
    assert same["thread_id"] == thread["thread_id"]
    patched = await sdk.threads.update(thread["thread_id"], metadata={"agent_name": "x"})
    assert patched["metadata"] == {"k": tag, "agent_name": "x"}
    hits = await sdk.threads.search(metadata={"k": tag})
    assert [t["thread_id"] for t in hits] == [thread["thread_id"]]
    assert await sdk.threads.search(metadata={"k": tag}, status="busy") == []
    await sdk.threads.delete(thread["thread_id"])
    with pytest.raises(NotFoundError):
        await sdk.threads.get(thread["thread_id"])


async def test_a_streamed_run_grows_values_and_its_messages_are_the_final_state(url: str) -> None:
    sdk = get_client(url=url)
    thread = await sdk.threads.create()
    created: list[Any] = []
    parts = await collect(
        sdk.runs.stream(
            thread["thread_id"], "hartflow", input=user("hello"), stream_mode=MODES, on_run_created=created.append
        )
    )
    assert parts[0].event == "metadata"
    run_id = parts[0].data["run_id"]
    assert created and created[0]["run_id"] == run_id and created[0]["thread_id"] == thread["thread_id"]
    values = [p.data for p in parts if p.event == "values"]
    for before, after in itertools.pairwise(values):
        assert message_ids(after)[: len(message_ids(before))] == message_ids(before)
    final = values[-1]
    assert final["messages"][-1]["content"] == "first answer"
    tuples = [p.data for p in parts if p.event == "messages"]
    assert tuples and all(len(t) == 2 and t[0]["id"] in message_ids(final) for t in tuples)
    assert any(p.event == "custom" and p.data["kind"] == "run_finished" for p in parts)
    assert [p.event for p in parts if p.event != "end"][-1] in ("values", "custom")
    assert parts[-1].event == "end"
    ids = [p.id for p in parts if p.event not in ("metadata", "end")]
    assert len(ids) == len(set(ids))

    assert (await sdk.runs.get(thread["thread_id"], run_id))["status"] == "success"
    assert (await sdk.threads.get(thread["thread_id"]))["status"] == "idle"
    state = await sdk.threads.get_state(thread["thread_id"])
    assert state["values"] == final and state["next"] == []


async def test_wait_equals_get_state_and_history_is_newest_first(url: str, scripts: dict[str, str]) -> None:
    sdk = get_client(url=url)
    thread = await sdk.threads.create()
    first = await sdk.runs.wait(thread["thread_id"], "hartflow", input=user("one"))
    assert first == (await sdk.threads.get_state(thread["thread_id"]))["values"]
    # The second run pauses for the clarification: wait answers with the interrupt.
    paused = await sdk.runs.wait(
        thread["thread_id"], "hartflow", input=user("two"), context={"model_name": scripts["ask"]}
    )
    assert paused["__interrupt__"][0]["value"]["question"].startswith("Which colour?")
    history = await sdk.threads.get_history(thread["thread_id"], limit=3)
    versions = [h["checkpoint"]["checkpoint_id"] for h in history]
    assert versions == ["v2", "v2-input", "v1"], "newest first, each run's input checkpoint below its version"
    assert history[0]["values"] == (await sdk.threads.get_state(thread["thread_id"]))["values"]
    assert len(history[1]["values"]["messages"]) < len(history[0]["values"]["messages"])
    assert await sdk.threads.get_state(thread["thread_id"], checkpoint_id=versions[1]) == history[1]
    runs = await sdk.runs.list(thread["thread_id"])
    assert [r["status"] for r in runs] == ["success", "success"]


async def _pause(sdk: Any, thread_id: str, ask_script: str) -> list[Any]:
    await sdk.runs.wait(thread_id, "hartflow", input=user("one"))
    return await collect(
        sdk.runs.stream(
            thread_id, "hartflow", input=user("pick"), stream_mode=["values"], context={"model_name": ask_script}
        )
    )


async def test_clarification_is_an_interrupt_and_resume_continues_the_same_workflow(
    url: str, scripts: dict[str, str], client: Client
) -> None:
    sdk = get_client(url=url)
    thread_id = (await sdk.threads.create())["thread_id"]
    parts = await _pause(sdk, thread_id, scripts["ask"])
    last_values = [p.data for p in parts if p.event == "values"][-1]
    interrupt = last_values["__interrupt__"][0]
    assert interrupt["value"]["human_input_request"]["kind"] == "human_input_request"
    thread = await sdk.threads.get(thread_id)
    assert thread["status"] == "interrupted"
    assert list(thread["interrupts"].values()) == [[interrupt]]
    state = await sdk.threads.get_state(thread_id)
    assert state["next"] == ["ask_clarification"]
    assert state["tasks"][0]["interrupts"][0]["value"]["question"] == interrupt["value"]["question"]
    assert (await sdk.runs.get(thread_id, parts[0].data["run_id"]))["status"] == "success"
    first_run = (await client.get_workflow_handle(run_workflow_id("default", thread_id)).describe()).run_id

    with pytest.raises(UnprocessableEntityError):
        await sdk.runs.create(thread_id, "hartflow", command={"resume": {"option_id": "nope"}})
    assert (await sdk.threads.get(thread_id))["status"] == "interrupted"

    blue = next(o["id"] for o in interrupt["value"]["human_input_request"]["options"] if o["label"] == "blue")
    resumed = await collect(sdk.runs.stream(thread_id, "hartflow", command={"resume": {"option_id": blue}}))
    final = [p.data for p in resumed if p.event == "values"][-1]
    assert final["messages"][-1]["content"] == "blue it is"
    assert message_ids(final)[: len(message_ids(last_values))] == message_ids(last_values)
    assert (await sdk.threads.get(thread_id))["status"] == "idle"
    workflow_id = run_workflow_id("default", thread_id)
    assert (await client.get_workflow_handle(workflow_id).describe()).run_id == first_run
    assert [r["status"] for r in await sdk.runs.list(thread_id)] == ["success"] * 3


async def test_a_text_resume_and_a_resume_on_an_idle_thread(url: str, scripts: dict[str, str]) -> None:
    sdk = get_client(url=url)
    thread_id = (await sdk.threads.create())["thread_id"]
    with pytest.raises(BadRequestError):
        await sdk.runs.create(thread_id, "hartflow", command={"resume": "too early"})
    assert await sdk.runs.list(thread_id) == []
    await _pause(sdk, thread_id, scripts["ask"])
    final = await sdk.runs.wait(thread_id, "hartflow", command={"resume": "the blue one"})
    texts = [m["content"] for m in final["messages"]]
    assert texts[-1] == "blue it is" and any("the blue one" in str(t) for t in texts)


async def test_a_busy_thread_conflicts_and_cancel_twice_is_409(
    home: Path, temporal_address: str, tmp_path: Path, client: Client
) -> None:
    release = tmp_path / "release"
    script = write_script(tmp_path, [{"content": "slow", "wait_for_file": str(release)}])
    recorder = ["tests.support.recording_middlewares:RecorderA"]
    config = make_config(home, temporal_address, model=script, run={"extensions": recorder})
    async with running_worker(client, config), serving_api(config, await connect(config)) as base:
        sdk = get_client(url=base)
        thread_id = (await sdk.threads.create())["thread_id"]
        run = await sdk.runs.create(thread_id, "hartflow", input=user("hold on"))
        with pytest.raises(ConflictError):
            await sdk.runs.create(thread_id, "hartflow", input=user("me too"), multitask_strategy="reject")
        with pytest.raises(ConflictError):
            await sdk.threads.delete(thread_id)
        assert (await sdk.threads.get(thread_id))["status"] == "busy"
        await sdk.runs.cancel(thread_id, run["run_id"], wait=True)
        assert (await sdk.runs.get(thread_id, run["run_id"]))["status"] == "interrupted"
        with pytest.raises(ConflictError):
            await sdk.runs.cancel(thread_id, run["run_id"])
        assert (await sdk.threads.get(thread_id))["status"] == "idle"
        events = await collect(sdk.runs.join_stream(thread_id, run["run_id"], stream_mode="custom", last_event_id="-1"))
        hooks = [p.data.get("hook") for p in events if p.event == "custom" and p.data["kind"] == "hook"]
        assert hooks[-1] == "after_agent"
        assert [r["run_id"] for r in await sdk.runs.list(thread_id)] == [run["run_id"]]
        # This server keeps api.allow_model_specs off: a raw spec (it would read a file on the server) is refused.
        with pytest.raises(UnprocessableEntityError):
            await sdk.runs.create(thread_id, "hartflow", input=user("hi"), context={"model_name": script})
        assert len(await sdk.runs.list(thread_id)) == 1


async def test_bad_input_is_4xx_and_writes_nothing(url: str, api_config: HartflowConfig) -> None:
    sdk = get_client(url=url)
    objects = open_object_store(api_config)
    before = {info.key for info in objects.list("users/")}
    with pytest.raises(UnprocessableEntityError):
        await sdk.threads.create(thread_id="../etc")
    with pytest.raises(UnprocessableEntityError):
        await sdk.threads.get("bad id!")
    with pytest.raises(NotFoundError):
        await sdk.runs.create("never-made", "hartflow", input=user("hi"))
    thread_id = (await sdk.threads.create())["thread_id"]
    after_create = {info.key for info in objects.list("users/")}
    with pytest.raises(UnprocessableEntityError):
        await collect(sdk.runs.stream(thread_id, "hartflow", input=user("hi"), stream_mode="events"))
    with pytest.raises(UnprocessableEntityError):
        await sdk.runs.create(thread_id, "hartflow", input=user("hi"), config={"recursion_limit": 0})
    assert {info.key for info in objects.list("users/")} == after_create
    assert len(after_create - before) == 1  # the thread's record, nothing else
    async with httpx.AsyncClient(base_url=url) as raw:
        response = await raw.post(f"/threads/{thread_id}/runs", content=b"x" * (api_config.api.max_body_bytes + 1))
        assert response.status_code == 413 and "detail" in response.json()
    assert await sdk.runs.list(thread_id) == []


async def test_the_sdk_default_payload_and_deerflows_are_served(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60) as raw:
        thread = (await raw.post("/api/threads", json={"metadata": {}})).json()
        body = {
            "assistant_id": "lead_agent",
            "input": user("hi"),
            "stream_mode": "values",
            "stream_subgraphs": False,
            "stream_resumable": False,
            "context": {
                "model_name": "scripted",
                "thinking_enabled": True,
                "is_plan_mode": False,
                "subagent_enabled": False,
            },
            "config": {"recursion_limit": 1000},
            "on_disconnect": "continue",
        }
        response = await raw.post(f"/api/threads/{thread['thread_id']}/runs/wait", json=body)
        assert response.status_code == 200, response.text
        assert response.json()["messages"][-1]["content"] == "first answer"
        assert response.headers["content-location"].startswith(f"/threads/{thread['thread_id']}/runs/")


async def test_deerflows_reply_message_and_a_plain_message_answer_the_pause(
    url: str, scripts: dict[str, str], client: Client
) -> None:
    sdk = get_client(url=url)
    thread_id = (await sdk.threads.create())["thread_id"]
    parts = await _pause(sdk, thread_id, scripts["ask"])
    request = [p.data for p in parts if p.event == "values"][-1]["__interrupt__"][0]["value"]["human_input_request"]
    red = next(o["id"] for o in request["options"] if o["label"] == "red")
    response = {
        "version": 1,
        "kind": "human_input_response",
        "source": "ask_clarification",
        "request_id": request["request_id"],
        "response_kind": "option",
        "value": "red",
        "option_id": red,
    }
    message = {"type": "human", "content": "red", "additional_kwargs": {"human_input_response": response}}
    final = await sdk.runs.wait(thread_id, "lead_agent", input={"messages": [message]})
    assert final["messages"][-1]["content"] == "blue it is"  # the script's answer to whatever was chosen
    replies = [m for m in final["messages"] if m["type"] == "human" and m["additional_kwargs"].get("hide_from_ui")]
    assert replies and "red" in str(replies[-1]["content"])

    # A plain message on an interrupted thread is a free-text answer, to the same workflow.
    other = (await sdk.threads.create())["thread_id"]
    await _pause(sdk, other, scripts["ask"])
    paused_run = (await client.get_workflow_handle(run_workflow_id("default", other)).describe()).run_id
    final = await sdk.runs.wait(other, "hartflow", input=user("green, actually"))
    assert any("green, actually" in str(m["content"]) for m in final["messages"])
    other_workflow = run_workflow_id("default", other)
    assert (await client.get_workflow_handle(other_workflow).describe()).run_id == paused_run


async def test_if_not_exists_create_makes_the_thread(url: str) -> None:
    sdk = get_client(url=url)
    thread_id = unique("made-by-run")
    final = await sdk.runs.wait(thread_id, "hartflow", input=user("hi"), if_not_exists="create")
    assert final["messages"][-1]["content"] == "first answer"
    assert (await sdk.threads.get(thread_id))["status"] == "idle"
