"""DeerFlow's frontend speaks to its server through the official JS client (``@langchain/langgraph-sdk``): that
client, installed from npm by this test and run by node, creates a thread, streams a run that pauses on a
scripted ``ask_clarification`` (an interrupt), resumes it with ``command: {resume: ...}`` and streams the same
durable workflow to its end, against a real uvicorn on loopback with bearer auth (the client's ``apiKey``).

The client is installed with ``npm ci`` from ``tests/js_client/package-lock.json`` into this session's
temporary directory (npm's own cache makes a second install quick), so a fresh machine needs only node and
the npm registry."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus

from tests.support import run_process
from vocabulary.workflow_ids import run_workflow_id
from workers.config import HartflowConfig
from workers.payloads import client_for
from workers.testing import answer, calls, make_config, running_worker, serving_api, tool_call, write_script

JS_CLIENT = Path(__file__).parent / "js_client"
TOKEN = "js-client-token-0123456789"
NODE_TIMEOUT = 240


def _node_env() -> dict[str, str]:
    # The client would read LANGGRAPH_/LANGSMITH_/LANGCHAIN_API_KEY from the environment: only ours counts.
    return {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("HARTFLOW_")}


async def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    return await run_process(*argv, timeout=NODE_TIMEOUT, env=env, cwd=cwd)


@pytest.fixture(scope="session")
async def js_client_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("node and npm are needed for the JS client test (DeerFlow's frontend client)")
    directory = tmp_path_factory.mktemp("js-client")
    for name in ("package.json", "package-lock.json", "interrupt_resume.mjs", "streamed_answer.mjs"):
        shutil.copy(JS_CLIENT / name, directory / name)
    code, out, err = await _run(["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"], directory, _node_env())
    assert code == 0, f"npm ci failed:\n{out}\n{err}"
    return directory


@pytest.fixture
def api_config(home: Path, temporal_address: str, tmp_path: Path) -> HartflowConfig:
    ask = tool_call(
        "ask_clarification",
        "call-colour",
        question="Which colour?",
        clarification_type="approach_choice",
        options=["red", "blue"],
    )
    model = write_script(tmp_path, [calls(ask), answer("Painted it blue.")])
    tokens = [{"user_id": "js-user", "token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}]
    return make_config(home, temporal_address, model=model, api={"auth": "bearer", "tokens": tokens})


@pytest.fixture
async def url(api_config: HartflowConfig, client: Client) -> AsyncIterator[str]:
    connected = client_for(client, api_config)
    async with running_worker(client, api_config), serving_api(api_config, connected) as base:
        yield base


@pytest.fixture
async def streamed_url(home: Path, temporal_address: str, tmp_path: Path, client: Client) -> AsyncIterator[str]:
    story = {"chunks": STORY, "chunk_delay": 0.05, "response_metadata": {"finish_reason": "stop"}}
    tokens = [{"user_id": "js-user", "token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}]
    config = make_config(
        home, temporal_address, model=write_script(tmp_path, [story]), api={"auth": "bearer", "tokens": tokens}
    )
    async with running_worker(client, config), serving_api(config, client_for(client, config)) as base:
        yield base


STORY = ["Once", *(f" upon a time {index}" for index in range(30))]


async def test_js_client_sees_a_streamed_answer_in_chunks_before_the_final_message(
    js_client_dir: Path, streamed_url: str
) -> None:
    """Live tokens (issue #28): ``messages-tuple`` parts carry ``AIMessageChunk``s under the final message's id,
    as DeerFlow's ``useStream`` reads them (``frontend/src/core/threads/hooks.ts``)."""
    env = {**_node_env(), "HARTFLOW_API_URL": streamed_url, "HARTFLOW_API_TOKEN": TOKEN}
    code, out, err = await _run(["node", "streamed_answer.mjs"], js_client_dir, env)
    assert code == 0, f"node failed:\n{err}"
    parts = json.loads(out)["parts"]
    final = _values(parts)[-1]["messages"][-1]
    assert final["content"] == "".join(STORY)
    answered = next(
        i for i, p in enumerate(parts) if p["event"] == "values" and p["data"]["messages"][-1]["type"] == "ai"
    )
    chunks = [p["data"][0] for p in parts if p["event"] == "messages" and p["data"][0]["type"] == "AIMessageChunk"]
    early = [p for p in parts[:answered] if p["event"] == "messages" and p["data"][0]["type"] == "AIMessageChunk"]
    assert len(early) >= 10, "chunks arrive before the final message"
    assert {chunk["id"] for chunk in chunks} == {final["id"]}
    assert "".join(chunk["content"] for chunk in chunks) == final["content"]


def _values(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [part["data"] for part in parts if part["event"] == "values"]


async def test_js_client_streams_interrupts_and_resumes(js_client_dir: Path, url: str, client: Client) -> None:
    env = {**_node_env(), "HARTFLOW_API_URL": url, "HARTFLOW_API_TOKEN": TOKEN}
    code, out, err = await _run(["node", "interrupt_resume.mjs"], js_client_dir, env)
    assert code == 0, f"node failed:\n{err}"
    seen = json.loads(out)

    first, resumed = seen["first"], seen["resumed"]
    assert first[0]["event"] == "metadata" and first[0]["data"]["run_id"] == seen["created"]["run_id"]
    assert seen["created"]["thread_id"] == seen["thread_id"]
    (interrupt,) = _values(first)[-1]["__interrupt__"]
    assert interrupt["value"]["question"] == "Which colour?"
    assert interrupt["value"]["options"] == ["red", "blue"]
    assert {"messages", "updates"} <= {part["event"] for part in first}

    assert seen["paused"]["status"] == "interrupted"
    assert [item["id"] for items in seen["paused"]["interrupts"].values() for item in items] == [interrupt["id"]]
    assert seen["state"]["next"] == ["ask_clarification"]
    assert seen["state"]["tasks"][0]["interrupts"][0]["id"] == interrupt["id"]

    assert resumed[0]["event"] == "metadata" and resumed[0]["data"]["run_id"] != seen["created"]["run_id"]
    final = _values(resumed)[-1]
    assert "__interrupt__" not in final
    assert final["messages"][-1]["content"] == "Painted it blue."
    assert any(m["type"] == "tool" and "blue" in str(m["content"]) for m in final["messages"])
    assert seen["done"]["status"] == "idle" and seen["done"]["values"]["messages"] == final["messages"]
    assert {run["status"] for run in seen["runs"]} == {"success"} and len(seen["runs"]) == 2

    # The answer resumed the paused workflow through its `reply` update, and the workflow that completed is the
    # one the first run started (its chain goes back to a plain start, not to another workflow).
    histories = await _chain_histories(client, run_workflow_id("js-user", seen["thread_id"]))
    assert (await client.get_workflow_handle(run_workflow_id("js-user", seen["thread_id"])).describe()).status == (
        WorkflowExecutionStatus.COMPLETED
    )
    updates = [
        event.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        for events in histories
        for event in events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    ]
    assert "reply" in updates
    oldest = histories[-1][0].workflow_execution_started_event_attributes
    assert not oldest.continued_execution_run_id and not oldest.parent_workflow_execution.workflow_id


async def _chain_histories(client: Client, workflow_id: str) -> list[list[Any]]:
    """The histories of the workflow's continue-as-new chain, newest run first."""
    run_id = (await client.get_workflow_handle(workflow_id).describe()).run_id
    histories = []
    while run_id:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        events = [event async for event in handle.fetch_history_events()]
        histories.append(events)
        run_id = events[0].workflow_execution_started_event_attributes.continued_execution_run_id
    return histories
