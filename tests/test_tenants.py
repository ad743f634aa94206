"""Two users, one thread name: each user's thread is a workflow of its own (``vocabulary/workflow_ids.py``).

Before ids were per user, the workflow id was ``hartflow-{thread}`` for everyone, and a second user could, with
a thread of the same name, destroy the first user's paused run (his delete removed its payloads), keep it busy
(409 for its owner), or occupy a user's memory queue or a model's breaker (thread ``memory-bob``). Runs started
under that legacy id still exist after an upgrade: they are found by their own user only, answered, finished and
replayed. Driven through the official ``langgraph-sdk`` against a real server, a real worker and real Temporal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Replayer

from tests.support import worker_and_api
from tests.support.tenants import bearer_api, sdk_as
from vocabulary.breaker import WORKFLOW_NAME as BREAKER_WORKFLOW
from vocabulary.breaker import breaker_workflow_id
from vocabulary.contracts import MEMORY_WORKFLOW, MEMORY_WORKFLOW_ID_PREFIX
from vocabulary.workflow_ids import legacy_run_workflow_id, run_workflow_id
from workers.config import HartflowConfig, open_object_store
from workers.models import select_model
from workers.payloads import client_for
from workers.testing import answer, ask_clarification, make_config, write_script
from workers.worker import WORKFLOWS, workflow_runner
from workflows import search_attributes as sa
from workflows.run import WORKFLOW_NAME, RunInput, RunWorkflow


@pytest.fixture
def scripts(tmp_path: Path) -> dict[str, str]:
    return {
        "ask": write_script(tmp_path, [ask_clarification("Which colour?", options=["red", "blue"]), answer("done")]),
        "answer": write_script(tmp_path, [answer("bob's answer")]),
    }


@pytest.fixture
def api_config(home: Path, temporal_address: str, scripts: dict[str, str], tmp_path: Path) -> HartflowConfig:
    return make_config(
        home,
        temporal_address,
        model=scripts["ask"],
        # Every payload goes to storage (a reference stays in history): deleting another run's is then fatal to it.
        storage={"payload_threshold_bytes": 1024},
        api=bearer_api(tmp_path),
    )


@pytest.fixture
async def url(api_config: HartflowConfig, client: Client) -> AsyncIterator[str]:
    async with worker_and_api(api_config, client) as base:
        yield base


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def payload_keys(config: HartflowConfig) -> set[str]:
    return {info.key for info in open_object_store(config).list("payloads/")}


async def workflow_type(client: Client, workflow_id: str) -> str | None:
    """The type of the workflow holding ``workflow_id``, ``None`` when none does."""
    try:
        return (await client.get_workflow_handle(workflow_id).describe()).workflow_type
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


async def test_deleting_your_own_thread_of_a_name_leaves_another_users_paused_run_whole(
    url: str, api_config: HartflowConfig
) -> None:
    alice, bob = sdk_as(url, "alice"), sdk_as(url, "bob")
    thread_id = (await alice.threads.create())["thread_id"]
    await alice.runs.wait(thread_id, "hartflow", input=user("paint it"))
    assert (await alice.threads.get(thread_id))["status"] == "interrupted"
    alices_payloads = payload_keys(api_config)
    assert alices_payloads, "the run's payloads are in storage (payload_threshold_bytes)"

    await bob.threads.create(thread_id=thread_id)  # his own thread of that name
    await bob.threads.delete(thread_id)

    assert payload_keys(api_config) >= alices_payloads
    final = await alice.runs.wait(thread_id, "hartflow", command={"resume": "blue"})
    assert final["messages"][-1]["content"] == "done"
    assert (await alice.threads.get(thread_id))["status"] == "idle"


async def test_another_user_can_neither_block_nor_see_a_thread_of_the_same_name(
    url: str, client: Client, scripts: dict[str, str]
) -> None:
    alice, bob = sdk_as(url, "alice"), sdk_as(url, "bob")
    thread_id = (await alice.threads.create())["thread_id"]
    await alice.runs.wait(thread_id, "hartflow", input=user("paint it"))  # paused

    await bob.threads.create(thread_id=thread_id)
    assert (await bob.threads.get(thread_id))["status"] == "idle"
    assert await bob.runs.list(thread_id) == []
    final = await bob.runs.wait(thread_id, "hartflow", input=user("hello"), context={"model_name": scripts["answer"]})
    assert final["messages"][-1]["content"] == "bob's answer"
    assert (await alice.threads.get(thread_id))["status"] == "interrupted"
    assert len(await alice.runs.list(thread_id)) == 1
    alices = await client.get_workflow_handle(run_workflow_id("alice", thread_id)).describe()
    bobs = await client.get_workflow_handle(run_workflow_id("bob", thread_id)).describe()
    assert (alices.status, bobs.status) == (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.COMPLETED)


async def test_no_thread_name_reaches_a_memory_queue_or_a_breaker(url: str, client: Client) -> None:
    alice = sdk_as(url, "alice")
    names = ["memory-bob", "breaker-openai-gpt-4o"]
    for name in names:
        await alice.threads.create(thread_id=name)
        await alice.runs.wait(name, "hartflow", input=user("paint it"))  # paused: its workflow stays open
    # Other tests' runs may have started bob's memory queue: whatever holds these ids, it is no run of alice's.
    assert await workflow_type(client, f"{MEMORY_WORKFLOW_ID_PREFIX}bob") in (None, MEMORY_WORKFLOW)
    assert await workflow_type(client, breaker_workflow_id("openai:gpt-4o")) in (None, BREAKER_WORKFLOW)
    for name in names:
        assert await workflow_type(client, run_workflow_id("alice", name)) == WORKFLOW_NAME


async def test_a_run_started_under_the_legacy_id_is_found_answered_and_replayed_by_its_user_only(
    url: str, client: Client, api_config: HartflowConfig
) -> None:
    """A run an earlier hartflow started as ``hartflow-{thread}`` (as its clients did: that id, the user in its
    search attributes) keeps working after the upgrade, for its user and nobody else."""
    alice, bob = sdk_as(url, "alice"), sdk_as(url, "bob")
    thread_id = (await alice.threads.create())["thread_id"]
    legacy_id = legacy_run_workflow_id(thread_id)
    handle = await client_for(client, api_config).start_workflow(
        RunWorkflow.run,
        RunInput(
            thread_id=thread_id,
            user_id="alice",
            message="paint it",
            model=select_model(api_config).spec,
            settings=api_config.run,
        ),
        id=legacy_id,
        task_queue=api_config.temporal.task_queue,
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(sa.THREAD_ID, thread_id),
                SearchAttributePair(sa.USER_ID, "alice"),
                SearchAttributePair(sa.STATUS, "running"),
            ]
        ),
    )
    await handle.execute_update("wait_settled")
    assert (await alice.threads.get(thread_id))["status"] == "interrupted"
    legacy_payloads = {key for key in payload_keys(api_config) if f"/wi/{legacy_id}/" in key}
    assert legacy_payloads

    # Bob's thread of that name is his own: idle, and his delete leaves the legacy run's payloads alone.
    await bob.threads.create(thread_id=thread_id)
    assert (await bob.threads.get(thread_id))["status"] == "idle"
    await bob.threads.delete(thread_id)
    assert legacy_payloads <= payload_keys(api_config)
    # Alice's message answers the legacy run's question: the same workflow finishes, no second one starts.
    final = await alice.runs.wait(thread_id, "hartflow", input=user("blue"))  # a message answers the pause
    assert final["messages"][-1]["content"] == "done"
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
    assert await workflow_type(client, run_workflow_id("alice", thread_id)) is None, "no second workflow started"

    history = await handle.fetch_history()
    replayer = Replayer(
        workflows=list(WORKFLOWS),
        data_converter=client_for(client, api_config).data_converter,
        workflow_runner=workflow_runner(),
    )
    await replayer.replay_workflow(history)
    assert json.loads(history.to_json())["events"][0]["workflowExecutionStartedEventAttributes"]["workflowId"] == (
        legacy_id
    )


async def test_a_delete_racing_a_run_create_never_leaves_a_run_that_cannot_end(
    url: str, client: Client, scripts: dict[str, str]
) -> None:
    """The delete lists the thread's stored runs, then removes them: a run starting meanwhile is not among them,
    and the start inputs (shared by the id's runs) go only while no run is open. Before, the delete removed the
    new run's input, and every workflow task of that run failed for good: a run no cancel or delete could end."""
    alice = sdk_as(url, "alice")
    quick = {"model_name": scripts["answer"]}
    for _ in range(8):
        thread_id = (await alice.threads.create())["thread_id"]
        await alice.runs.wait(thread_id, "hartflow", input=user("first"), context=quick)
        await asyncio.gather(
            alice.runs.wait(thread_id, "hartflow", input=user("second"), context=quick),
            alice.threads.delete(thread_id),
            return_exceptions=True,  # either may lose the race (404, 409): what matters is what is left
        )
        for workflow_id in (run_workflow_id("alice", thread_id), legacy_run_workflow_id(thread_id)):
            if await workflow_type(client, workflow_id) is None:
                continue  # the legacy id: before ids were per user, the thread's runs were there
            handle = client.get_workflow_handle(workflow_id)
            with contextlib.suppress(WorkflowFailureError):
                await handle.result()  # every run of the thread ends
            assert (await handle.describe()).status != WorkflowExecutionStatus.RUNNING
