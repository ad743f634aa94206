"""A second message on a busy thread through ``langgraph-sdk`` on a real uvicorn, worker and Temporal server:
``multitask_strategy`` ``interrupt`` and ``rollback`` leave the thread as LangGraph documents them (``interrupt``:
the running run is cancelled and reads ``interrupted``, what it committed stays, the new run follows;
``rollback``: the same, then the thread returns to the version before the interrupted run, which is deleted),
``cancel?action=rollback`` (``RunsClient.cancel(..., action="rollback")``), and a thread waiting for an answer
still takes a new message as the answer whatever the strategy."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError
from temporalio.client import Client

from tests.support import model_specs
from workers.testing import answer, make_config, running_worker, serving_api, write_script
from workers.worker import connect


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def humans(values: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in values.get("messages", []) if m.get("type") == "human"]


@pytest.fixture
def slow(tmp_path: Path) -> str:
    """A model whose first call blocks until the test ends (the file never appears): a run that stays busy."""
    return write_script(tmp_path, [{"content": "slow", "wait_for_file": str(tmp_path / "never")}])


@pytest.fixture
async def sdk(home: Path, temporal_address: str, tmp_path: Path, client: Client) -> AsyncIterator[LangGraphClient]:
    config = make_config(
        home,
        temporal_address,
        model=write_script(tmp_path, [answer("done")]),
        api=model_specs(tmp_path),
    )
    async with running_worker(client, config), serving_api(config, await connect(config)) as base:
        yield get_client(url=base)


async def busy_thread(sdk: LangGraphClient, slow: str) -> tuple[str, str]:
    """A thread with one finished run and a second that is busy: the thread id and the busy run's id."""
    thread_id = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(thread_id, "hartflow", input=user("first"))
    busy = await sdk.runs.create(thread_id, "hartflow", input=user("second"), context={"model_name": slow})
    assert (await sdk.threads.get(thread_id))["status"] == "busy"
    return thread_id, busy["run_id"]


async def test_interrupt_cancels_the_running_run_then_runs_the_new_one(sdk: LangGraphClient, slow: str) -> None:
    thread_id, busy = await busy_thread(sdk, slow)
    final = await sdk.runs.wait(thread_id, "hartflow", input=user("third"), multitask_strategy="interrupt")
    assert humans(final) == ["first", "second", "third"] and final["messages"][-1]["content"] == "done"
    assert (await sdk.runs.get(thread_id, busy))["status"] == "interrupted"
    runs = await sdk.runs.list(thread_id)
    assert [r["status"] for r in runs] == ["success", "interrupted", "success"]
    assert runs[0]["multitask_strategy"] == "interrupt"
    assert (await sdk.threads.get(thread_id))["status"] == "idle"


async def test_rollback_returns_the_thread_to_before_the_interrupted_run(sdk: LangGraphClient, slow: str) -> None:
    thread_id, busy = await busy_thread(sdk, slow)
    final = await sdk.runs.wait(thread_id, "hartflow", input=user("third"), multitask_strategy="rollback")
    assert humans(final) == ["first", "third"]
    assert humans((await sdk.threads.get_state(thread_id))["values"]) == ["first", "third"]
    with pytest.raises(NotFoundError):
        await sdk.runs.get(thread_id, busy)
    assert len(await sdk.runs.list(thread_id)) == 2


async def test_cancel_with_rollback(sdk: LangGraphClient, slow: str) -> None:
    thread_id, busy = await busy_thread(sdk, slow)
    await sdk.runs.cancel(thread_id, busy, wait=True, action="rollback")
    assert humans((await sdk.threads.get_state(thread_id))["values"]) == ["first"]
    with pytest.raises(NotFoundError):
        await sdk.runs.get(thread_id, busy)
    assert (await sdk.threads.get(thread_id))["status"] == "idle"
