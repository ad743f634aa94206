"""``multitask_strategy: enqueue`` (the default) through ``langgraph-sdk`` on real API server processes, a worker
and the Temporal dev server: messages sent to a busy thread wait in the thread's queue workflow and run when the
busy run ends, in the order they came, each once, though the API server that took some of them was killed
(SIGKILL) before they ran; a queued run reads ``pending`` until it starts; a refused message queues and records
nothing; ``reject`` still refuses (409); a queued run cancelled before it started never runs; a queued run that failed
reads ``error`` after the next one ran."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import ConflictError, UnprocessableEntityError
from temporalio.client import Client

from tests.support import model_specs, two_api_servers
from vocabulary.contracts import ThreadRef
from workers.client.queue import ThreadQueue
from workers.config import HartflowConfig
from workers.testing import answer, make_config, running_worker, serving_api, write_script
from workers.worker import connect

QUEUED = ["one", "two", "three", "four", "five"]


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def humans(values: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in values.get("messages", []) if m.get("type") == "human"]


@pytest.fixture
def config(home: Path, temporal_address: str, tmp_path: Path) -> HartflowConfig:
    return make_config(
        home,
        temporal_address,
        model=write_script(tmp_path, [answer("done")]),
        api=model_specs(tmp_path),
    )


@pytest.fixture
def release(tmp_path: Path) -> Path:
    """The file the busy run's model call waits for: the test ends the busy run by writing it."""
    return tmp_path / "release"


@pytest.fixture
def slow(tmp_path: Path, release: Path) -> str:
    return write_script(tmp_path, [{**answer("slow done"), "wait_for_file": str(release)}])


@pytest.fixture
async def sdk(config: HartflowConfig, client: Client) -> AsyncIterator[LangGraphClient]:
    async with running_worker(client, config), serving_api(config, await connect(config)) as base:
        yield get_client(url=base)


async def busy_thread(sdk: LangGraphClient, slow: str) -> tuple[str, str]:
    thread_id = (await sdk.threads.create())["thread_id"]
    busy = await sdk.runs.create(thread_id, "hartflow", input=user("busy"), context={"model_name": slow})
    assert (await sdk.threads.get(thread_id))["status"] == "busy"
    return thread_id, busy["run_id"]


async def test_five_queued_messages_run_in_order_once_though_an_api_server_was_killed(
    client: Client, config: HartflowConfig, slow: str, release: Path, tmp_path: Path
) -> None:
    """The first two are sent without a strategy (langgraph-api's default, enqueue), the rest name it; the server
    that took the first three is killed before any of them ran, and a second server takes the last two."""
    with two_api_servers(config, tmp_path) as (first, second):
        async with running_worker(client, config):
            try:
                first.start()
                sdk = get_client(url=first.url)
                thread_id, busy = await busy_thread(sdk, slow)
                queued = []
                for index, text in enumerate(QUEUED[:3]):
                    strategy: dict[str, Any] = {} if index < 2 else {"multitask_strategy": "enqueue"}
                    run = await sdk.runs.create(thread_id, "hartflow", input=user(text), **strategy)
                    assert run["status"] == "pending" and run["multitask_strategy"] == "enqueue"
                    queued.append(run["run_id"])
                assert [r["status"] for r in await sdk.runs.list(thread_id)][:3] == ["pending"] * 3
                first.kill()

                second.start()
                sdk = get_client(url=second.url)
                for text in QUEUED[3:]:
                    run = await sdk.runs.create(thread_id, "hartflow", input=user(text), multitask_strategy="enqueue")
                    queued.append(run["run_id"])
                assert (await sdk.runs.get(thread_id, queued[0]))["status"] == "pending"
                release.write_text("go")

                final = await sdk.runs.join(thread_id, queued[-1])
                assert humans(final) == ["busy", *QUEUED]
                answers = [m["content"] for m in final["messages"] if m["type"] == "ai"]
                assert answers == ["slow done", *["done"] * 5]
                runs = await sdk.runs.list(thread_id)
                assert [r["run_id"] for r in runs] == [*reversed(queued), busy]
                assert {r["status"] for r in runs} == {"success"}
                assert (await sdk.threads.get(thread_id))["status"] == "idle"
            finally:
                release.write_text("go")


async def test_reject_is_still_409_and_a_refused_message_queues_nothing(
    sdk: LangGraphClient, slow: str, release: Path, config: HartflowConfig
) -> None:
    thread_id, busy = await busy_thread(sdk, slow)
    with pytest.raises(ConflictError):
        await sdk.runs.create(thread_id, "hartflow", input=user("no"), multitask_strategy="reject")
    with pytest.raises(UnprocessableEntityError):  # a model file outside api.model_scripts_dir
        await sdk.runs.create(thread_id, "hartflow", input=user("bad"), context={"model_name": "scripted:/etc/passwd"})
    with pytest.raises(UnprocessableEntityError):  # an empty message
        await sdk.runs.create(thread_id, "hartflow", input=user(" "))
    assert [r["run_id"] for r in await sdk.runs.list(thread_id)] == [busy]
    queue = ThreadQueue(await connect(config))
    assert not await queue.is_open(ThreadRef(user_id="default", thread_id=thread_id))
    release.write_text("go")
    await sdk.runs.join(thread_id, busy)


async def test_a_queued_run_cancelled_before_it_started_never_runs(
    sdk: LangGraphClient, slow: str, release: Path
) -> None:
    thread_id, _ = await busy_thread(sdk, slow)
    dropped = await sdk.runs.create(thread_id, "hartflow", input=user("dropped"))
    kept = await sdk.runs.create(thread_id, "hartflow", input=user("kept"))
    await sdk.runs.cancel(thread_id, dropped["run_id"], wait=True)
    assert (await sdk.runs.get(thread_id, dropped["run_id"]))["status"] == "interrupted"
    release.write_text("go")
    final = await sdk.runs.join(thread_id, kept["run_id"])
    assert humans(final) == ["busy", "kept"]
    assert await sdk.runs.join(thread_id, dropped["run_id"]) == {}


async def test_a_queued_run_that_failed_reads_error_after_the_next_one_ran(
    sdk: LangGraphClient, slow: str, release: Path, tmp_path: Path
) -> None:
    """A run the queue started has no API start to write down how its chain ended when a newer chain replaces it;
    it read ``success`` once the run queued after it started."""
    thread_id, busy = await busy_thread(sdk, slow)
    failing = await sdk.runs.create(
        thread_id, "hartflow", input=user("fails"), context={"model_name": write_script(tmp_path, [])}
    )
    after = await sdk.runs.create(thread_id, "hartflow", input=user("after"))
    release.write_text("go")
    await sdk.runs.join(thread_id, after["run_id"])
    assert (await sdk.runs.get(thread_id, failing["run_id"]))["status"] == "error"
    listed = {run["run_id"]: run["status"] for run in await sdk.runs.list(thread_id)}
    assert listed == {busy: "success", failing["run_id"]: "error", after["run_id"]: "success"}


async def test_a_thread_with_queued_messages_is_not_deleted_until_they_ran(
    sdk: LangGraphClient, slow: str, release: Path
) -> None:
    """Deleting a thread whose queue holds a message would let the queue start a run on the deleted thread (and
    write it again): 409 until the queue has run (the API says so for the active run in front of it, the thread
    delete itself for a queue between two runs); the thread and its queued run are untouched."""
    thread_id, _ = await busy_thread(sdk, slow)
    queued = await sdk.runs.create(thread_id, "hartflow", input=user("queued"))
    with pytest.raises(ConflictError) as refused:
        await sdk.threads.delete(thread_id)
    assert "cancel" in refused.value.response.json()["detail"]
    release.write_text("go")
    final = await sdk.runs.join(thread_id, queued["run_id"])
    assert humans(final) == ["busy", "queued"]
    await sdk.threads.delete(thread_id)
    assert thread_id not in [t["thread_id"] for t in await sdk.threads.search(limit=100)]
