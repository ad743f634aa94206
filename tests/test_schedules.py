"""Schedules on Temporal Schedules, served as LangGraph's cron routes (through ``langgraph-sdk``'s ``crons``
client: ``langgraph_sdk/_async/cron.py``) on a real uvicorn, a real worker and the Temporal dev server's clock.

A schedule fires, its fire starts a run as the Agent Server starts every run, and the run appears in the thread;
a fire while the previous scheduled run waits for an answer skips (the overlap policy); pause, resume, trigger and
delete; bad input is 422 and writes nothing. DeerFlow's page and the CLI are in ``test_schedules_deerflow.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import NotFoundError, UnprocessableEntityError
from temporalio.client import Client

from tests.support import model_specs, worker_and_api
from tests.support.kube import eventually_async
from workers.config import HartflowConfig
from workers.schedules.book import Book, ScheduleNotFound
from workers.testing import answer, calls, make_config, tool_call, unique, write_script
from workers.worker import connect


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def ask(question: str) -> dict[str, Any]:
    args = {"question": question, "clarification_type": "approach_choice", "options": ["red", "blue"]}
    return calls(tool_call("ask_clarification", unique("call"), **args))


@pytest.fixture
def scripts(tmp_path: Path) -> dict[str, str]:
    return {
        "default": write_script(tmp_path, [answer("scheduled answer")]),
        "ask": write_script(tmp_path, [ask("Which colour?"), answer("blue it is")]),
    }


@pytest.fixture
def api_config(home: Path, temporal_address: str, scripts: dict[str, str], tmp_path: Path) -> HartflowConfig:
    return make_config(home, temporal_address, model=scripts["default"], api=model_specs(tmp_path))


@pytest.fixture
async def url(api_config: HartflowConfig, client: Client) -> AsyncIterator[str]:
    async with worker_and_api(api_config, client) as base:
        yield base


async def test_an_interval_schedule_fires_on_the_servers_clock_and_its_runs_appear_in_the_thread(url: str) -> None:
    sdk = get_client(url=url)
    assert (await sdk.http.get("/info"))["flags"]["crons"] is True
    thread = await sdk.threads.create()
    cron = await sdk.crons.create_for_thread(
        thread["thread_id"], "lead_agent", schedule="@every 2s", input=user("ping")
    )
    assert cron["thread_id"] == thread["thread_id"] and cron["enabled"] is True and cron["schedule"] == "@every 2s"
    assert cron["next_run_date"] is not None and cron["timezone"] == "UTC"

    async def two_runs() -> list[dict[str, Any]]:
        runs = await sdk.runs.list(thread["thread_id"])
        return runs if len(runs) >= 2 and all(run["status"] == "success" for run in runs) else []

    runs = await eventually_async(two_runs, timeout=60, what="two scheduled runs")
    assert {run["metadata"]["hartflow_schedule"] for run in runs} == {cron["cron_id"]}
    state = await sdk.threads.get_state(thread["thread_id"])
    texts = [message["content"] for message in state["values"]["messages"]]
    assert texts[:2] == ["ping", "scheduled answer"]

    paused = await sdk.crons.update(cron["cron_id"], enabled=False)
    assert paused["enabled"] is False and paused["next_run_date"] is None
    found = await sdk.crons.search(thread_id=thread["thread_id"])
    assert [c["cron_id"] for c in found] == [cron["cron_id"]] and found[0]["enabled"] is False
    assert await sdk.crons.count(thread_id=thread["thread_id"]) == 1
    resumed = await sdk.crons.update(cron["cron_id"], enabled=True, schedule="0 9 * * *", timezone="Europe/Paris")
    assert resumed["enabled"] is True and resumed["schedule"] == "0 9 * * *" and resumed["timezone"] == "Europe/Paris"
    assert resumed["next_run_date"].endswith(("T08:00:00+00:00", "T07:00:00+00:00"))  # 9:00 in Paris

    await sdk.crons.delete(cron["cron_id"])
    with pytest.raises(NotFoundError):
        await sdk.crons.delete(cron["cron_id"])
    assert await sdk.crons.search(thread_id=thread["thread_id"]) == []


async def test_a_fire_while_the_scheduled_run_waits_for_an_answer_skips(url: str, scripts: dict[str, str]) -> None:
    sdk = get_client(url=url)
    thread = await sdk.threads.create()
    cron = await sdk.crons.create_for_thread(
        thread["thread_id"],
        "lead_agent",
        schedule="0 0 1 1 *",
        input=user("pick a colour"),
        config={"configurable": {"model_name": scripts["ask"]}},
    )
    async with httpx.AsyncClient(base_url=url) as api:
        assert (await api.post(f"/runs/crons/{cron['cron_id']}/trigger")).status_code == 202

        async def interrupted() -> bool:
            return bool((await sdk.threads.get(thread["thread_id"]))["status"] == "interrupted")

        await eventually_async(interrupted, timeout=60, what="the scheduled run to pause on its question")
        assert (await api.post(f"/runs/crons/{cron['cron_id']}/trigger")).status_code == 202

        async def fires(count: int) -> list[dict[str, Any]]:
            shown = (await api.get(f"/runs/crons/{cron['cron_id']}")).json()["recent_fires"]
            return shown if len(shown) == count and all(f["outcome"] != "starting" for f in shown) else []

        newest, first = await eventually_async(lambda: fires(2), timeout=60, what="the second fire")
        assert first["outcome"] == "started" and newest["outcome"] == "skipped", (first, newest)
        assert "awaiting input" in newest["reason"] and newest["thread_id"] == thread["thread_id"]
        assert len(await sdk.runs.list(thread["thread_id"])) == 1
        values = (await sdk.threads.get_state(thread["thread_id"]))["values"]
        assert [m["content"] for m in values["messages"] if m["type"] == "human"] == ["pick a colour"]

        # The answer finishes the waiting run; the next fire starts a run again.
        await sdk.runs.wait(thread["thread_id"], "lead_agent", command={"resume": "blue"})
        assert (await api.post(f"/runs/crons/{cron['cron_id']}/trigger")).status_code == 202
        latest = (await eventually_async(lambda: fires(3), timeout=60, what="the third fire"))[0]
        assert latest["outcome"] == "started" and latest["run_id"]


async def test_a_fresh_thread_each_fire_and_per_user_schedules(url: str, api_config: HartflowConfig) -> None:
    sdk = get_client(url=url)
    cron = await sdk.crons.create("lead_agent", schedule="30 6 * * 1-5", input=user("morning"), timezone="Asia/Tokyo")
    assert cron["thread_id"] is None and cron["on_run_completed"] == "keep"
    async with httpx.AsyncClient(base_url=url) as api:
        await api.post(f"/runs/crons/{cron['cron_id']}/trigger")

        async def started() -> dict[str, Any] | None:
            shown = (await api.get(f"/runs/crons/{cron['cron_id']}")).json()["recent_fires"]
            return shown[0] if shown and shown[0]["outcome"] == "started" else None

        fire = await eventually_async(started, timeout=60, what="the fire")
    run = await sdk.runs.join(fire["thread_id"], fire["run_id"])
    assert run["messages"][-1]["content"] == "scheduled answer"

    client = await connect(api_config)
    bob = Book(client, api_config.temporal.task_queue)
    with pytest.raises(ScheduleNotFound):
        await bob.get("bob", cron["cron_id"])
    with pytest.raises(ScheduleNotFound):
        await bob.trigger("bob", cron["cron_id"])
    assert [view.cron_id for view in await bob.of_user("bob")] == []
    await sdk.crons.delete(cron["cron_id"])


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"schedule": "every day"}, "not a cron expression"),
        ({"schedule": "0 9 * * *", "timezone": "Mars/Base"}, "IANA time zone"),
        ({"schedule": "@every 0s"}, "shorter than"),
        ({"schedule": "0 9 * * *", "input": {"messages": []}}, "the message is empty"),
        ({"schedule": "0 9 * * *", "end_time": "2001-01-01T00:00:00Z"}, "end_at"),
        ({"schedule": "0 9 * * *", "on_run_completed": "delete"}, "on_run_completed"),
        ({"schedule": "0 9 * * *", "overlap": "allow"}, "one run at a time"),
        (
            {"schedule": "0 9 * * *", "config": {"configurable": {"model_name": "scripted:/etc/passwd"}}},
            "model_scripts_dir",
        ),
        ({"schedule": 5}, "schedule"),
    ],
)
async def test_bad_input_is_422_and_writes_nothing(url: str, body: dict[str, Any], problem: str) -> None:
    sdk = get_client(url=url)
    thread = await sdk.threads.create()
    sent = {"input": user("hi"), "assistant_id": "lead_agent", **body}
    async with httpx.AsyncClient(base_url=url) as api:
        answer_ = await api.post(f"/threads/{thread['thread_id']}/runs/crons", json=sent)
        assert answer_.status_code == 422 and problem in answer_.json()["detail"], answer_.text
        assert (
            await api.post("/threads/no-such-thread/runs/crons", json={**sent, "schedule": "0 9 * * *"})
        ).status_code == 404
        assert (await api.patch("/runs/crons/not-a-uuid", json={"enabled": False})).status_code == 404
    assert await sdk.crons.search(thread_id=thread["thread_id"]) == []
    with pytest.raises(UnprocessableEntityError):
        await sdk.crons.create_for_thread(thread["thread_id"], "lead_agent", schedule="nope", input=user("x"))
