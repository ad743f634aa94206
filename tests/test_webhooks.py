"""Webhooks on real servers: a run's final view POSTed once, signed, to a local receiver; retried through a
receiver that fails twice and through a worker SIGKILL; not retried on 400; refused for a private address unless
``webhooks.allow_networks`` opens it (by the API at once, and by the worker on delivery). ``langgraph-sdk``'s
``runs.wait(..., webhook=...)`` is the request a LangGraph client sends (``libs/sdk-py`` ``RunsClient.wait``)."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import UnprocessableEntityError
from temporalio.client import Client, WorkflowFailureError

from tests.webhook_receiver import Receiver
from vocabulary.contracts import ThreadRef, WebhookDelivered, WebhookTarget
from workers.client.runs import Runs, RunStart
from workers.config import HartflowConfig
from workers.payloads import client_for
from workers.testing import answer, make_config, running_worker, serving_api, unique, write_script
from workers.testing.processes import kill_hard, worker_process
from workers.worker import connect
from workflows.run.webhook import delivery_workflow_id

SECRET = "test-secret"
LOOPBACK = {"secret": SECRET, "allow_networks": ["127.0.0.1/32"]}


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def verified(headers: dict[str, str], body: str) -> bool:
    """What the README tells a receiver to do: HMAC-SHA256 of ``{timestamp}.{body}`` under the shared secret."""
    timestamp = headers["X-Hartflow-Timestamp"]
    expected = hmac.new(SECRET.encode(), f"{timestamp}.{body}".encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers["X-Hartflow-Signature"], f"sha256={expected}")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


def config_with(home: Path, address: str, model: str, webhooks: dict[str, Any]) -> HartflowConfig:
    return make_config(home, address, model=model, webhooks=webhooks)


@pytest.fixture
async def url(home: Path, temporal_address: str, tmp_path: Path, client: Client) -> AsyncIterator[str]:
    config = config_with(home, temporal_address, write_script(tmp_path, [answer("done")] * 3), LOOPBACK)
    async with running_worker(client, config), serving_api(config, await connect(config)) as base:
        yield base


async def delivery(client: Client, config: HartflowConfig, thread_id: str, run_id: str) -> WebhookDelivered:
    """The delivery workflow's result once it closed."""
    workflow_id = delivery_workflow_id(f"hartflow:{config.user_id}:{thread_id}", run_id)
    return await client_for(client, config).get_workflow_handle(workflow_id, result_type=WebhookDelivered).result()


async def test_delivered_once_with_a_valid_signature(url: str, receiver: Receiver) -> None:
    sdk = get_client(url=url)
    thread = await sdk.threads.create()
    result = await sdk.runs.wait(thread["thread_id"], "hartflow", input=user("hi"), webhook=receiver.url)
    assert result["messages"][-1]["content"] == "done"
    [got] = await receiver.wait_for(1)
    assert got.path == "/hook" and verified(got.headers, got.body)
    payload = json.loads(got.body)
    [run] = await sdk.runs.list(thread["thread_id"])
    assert payload["run_id"] == run["run_id"] and payload["thread_id"] == thread["thread_id"]
    assert payload["status"] == "success" and payload["run"]["status"] == "completed"
    assert payload["run"]["final_message"] == "done"
    assert run["kwargs"]["webhook"] == receiver.url


async def test_retried_through_two_failures_not_on_400(
    home: Path, temporal_address: str, tmp_path: Path, client: Client
) -> None:
    config = config_with(home, temporal_address, write_script(tmp_path, [answer("done")] * 2), LOOPBACK)
    failing, refusing = Receiver([500, 503]), Receiver([400])
    try:
        async with running_worker(client, config):
            first = await _run(client, config, failing.url)
            second = await _run(client, config, refusing.url)
            delivered = await delivery(client, config, *first)
            assert delivered.attempt == 3 and delivered.status_code == 200
            got = await failing.wait_for(3)
            assert [r.answered for r in got] == [500, 503, 200]
            assert len({r.headers["X-Hartflow-Delivery"] for r in got}) == 1 and len({r.body for r in got}) == 1
            with pytest.raises(WorkflowFailureError):
                await delivery(client, config, *second)
            assert [r.answered for r in refusing.received] == [400]
    finally:
        failing.close()
        refusing.close()


async def _run(client: Client, config: HartflowConfig, webhook: str) -> tuple[str, str]:
    """Start a run (as the CLI does) that reports to ``webhook``; its thread id and run id once it ended."""
    thread = ThreadRef(config.user_id, unique("thread"))
    run = RunStart(thread, "hi", str(config.model), config.run, webhook=WebhookTarget(webhook))
    handle = await Runs(client_for(client, config), config.temporal.task_queue).start(run)
    await handle.result()
    return thread.thread_id, handle.first_execution_run_id or ""


async def test_retried_through_a_worker_sigkill(
    home: Path, temporal_address: str, tmp_path: Path, client: Client
) -> None:
    config = config_with(home, temporal_address, write_script(tmp_path, [answer("done")]), LOOPBACK)
    down = Receiver([503] * 1000)
    try:
        with worker_process(config, tmp_path / "worker.yaml") as worker:
            thread = ThreadRef(config.user_id, unique("thread"))
            run = RunStart(thread, "hi", str(config.model), config.run, webhook=WebhookTarget(down.url))
            handle = await Runs(client_for(client, config), config.temporal.task_queue).start(run)
            await handle.result()
            await down.wait_for(1)
            kill_hard(worker)
        down.statuses.clear()  # the receiver is back: the next attempt, on the next worker, is delivered
        with worker_process(config, tmp_path / "worker2.yaml"):
            delivered = await delivery(client, config, thread.thread_id, handle.first_execution_run_id or "")
        assert delivered.status_code == 200
        assert [r.answered for r in down.received].count(200) == 1
        assert verified(down.received[-1].headers, down.received[-1].body)
    finally:
        down.close()


async def test_private_addresses_are_refused_without_the_allow_list(
    home: Path, temporal_address: str, tmp_path: Path, client: Client, receiver: Receiver
) -> None:
    config = config_with(home, temporal_address, write_script(tmp_path, [answer("done")]), {"secret": SECRET})
    async with running_worker(client, config), serving_api(config, await connect(config)) as base:
        sdk = get_client(url=base)
        thread = await sdk.threads.create()
        for private in (receiver.url, "http://localhost:9/x", "http://169.254.169.254/latest", "http://[::1]/"):
            with pytest.raises(UnprocessableEntityError):
                await sdk.runs.create(thread["thread_id"], "hartflow", input=user("hi"), webhook=private)
        for malformed in ("ftp://example.com/", "http://user:pw@example.com/", "not a url"):
            with pytest.raises(UnprocessableEntityError):
                await sdk.runs.create(thread["thread_id"], "hartflow", input=user("hi"), webhook=malformed)
        assert await sdk.runs.list(thread["thread_id"]) == []  # nothing written
        # A client that skips the API's check (or a name that resolves inward later) meets the worker's.
        thread_id, run_id = await _run(client, config, receiver.url)
        with pytest.raises(WorkflowFailureError) as failed:
            await delivery(client, config, thread_id, run_id)
        assert "WebhookRefused" in repr(failed.value.cause) or "private" in str(failed.value.cause.__cause__)
    assert receiver.received == []
