"""DeerFlow's Scheduled tasks page (``frontend/src/core/scheduled-tasks/api.ts`` and ``types.ts`` of
bytedance/deer-flow) and ``hartflow schedule``, on the same schedules as the cron routes (``test_schedules.py``):
real uvicorn, worker, Temporal dev server and storage; the model is scripted."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client

from tests.support.kube import eventually_async
from tests.test_schedules import api_config, scripts, url  # noqa: F401 (the same server)
from workers.cli import run_command

TASK_FIELDS = {
    "id", "thread_id", "context_mode", "title", "prompt", "schedule_type", "schedule_spec", "timezone", "status",
    "next_run_at", "last_run_at", "last_run_id", "last_thread_id", "last_error", "run_count", "created_at",
    "updated_at",
}  # fmt: skip


def task(**fields: Any) -> dict[str, Any]:
    """What the page's form sends (``ScheduledTaskPayload``)."""
    return {
        "context_mode": "fresh_thread_per_run",
        "title": "Morning brief",
        "prompt": "summarize the news",
        "schedule_type": "cron",
        "schedule_spec": {"cron": "0 9 * * 1-5"},
        "timezone": "Asia/Shanghai",
        **fields,
    }


async def test_the_scheduled_tasks_page_creates_pauses_resumes_triggers_and_deletes(url: str) -> None:  # noqa: F811
    async with httpx.AsyncClient(base_url=url) as api:
        created = (await api.post("/api/scheduled-tasks", json=task())).json()
        assert set(created) == TASK_FIELDS and created["status"] == "enabled"
        assert created["next_run_at"].endswith("T01:00:00+00:00")  # 9:00 in Shanghai
        assert created["prompt"] == "summarize the news" and created["schedule_spec"] == {"cron": "0 9 * * 1-5"}
        task_id = created["id"]

        async def listed() -> bool:
            return any(t["id"] == task_id for t in (await api.get("/api/scheduled-tasks")).json())

        await eventually_async(listed, what="the task listed")
        assert (await api.post(f"/api/scheduled-tasks/{task_id}/pause")).json()["status"] == "paused"
        assert (await api.post(f"/api/scheduled-tasks/{task_id}/resume")).json()["status"] == "enabled"
        edited = (await api.patch(f"/api/scheduled-tasks/{task_id}", json={"title": "Evening brief"})).json()
        assert edited["title"] == "Evening brief" and edited["prompt"] == "summarize the news"
        assert (await api.post(f"/api/scheduled-tasks/{task_id}/trigger")).json() == {"id": task_id, "triggered": True}

        async def finished_run() -> list[dict[str, Any]]:
            runs = (await api.get(f"/api/scheduled-tasks/{task_id}/runs")).json()
            return runs if runs and runs[0]["status"] == "success" else []

        [run] = await eventually_async(finished_run, timeout=60, what="the triggered run to finish")
        assert run["task_id"] == task_id and run["run_id"]
        state = await get_client(url=url).threads.get_state(run["thread_id"])
        assert [m["content"] for m in state["values"]["messages"]] == ["summarize the news", "scheduled answer"]
        shown = (await api.get(f"/api/scheduled-tasks/{task_id}")).json()
        assert shown["last_thread_id"] == run["thread_id"] and shown["run_count"] == 1

        thread = (await api.post("/threads", json={})).json()["thread_id"]
        reused = (
            await api.post("/api/scheduled-tasks", json=task(context_mode="reuse_thread", thread_id=thread))
        ).json()
        assert [t["id"] for t in (await api.get(f"/api/threads/{thread}/scheduled-tasks")).json()] == [reused["id"]]

        for task_id_ in (task_id, reused["id"]):
            assert (await api.delete(f"/api/scheduled-tasks/{task_id_}")).json() == {"id": task_id_, "deleted": True}
            assert (await api.get(f"/api/scheduled-tasks/{task_id_}")).status_code == 404


@pytest.mark.parametrize(
    ("fields", "status"),
    [
        ({"schedule_type": "weekly"}, 422),
        ({"schedule_spec": {"cron": "sometimes"}}, 422),
        ({"schedule_spec": {}}, 422),
        ({"timezone": "Mars/Base"}, 422),
        ({"schedule_type": "once", "schedule_spec": {"run_at": "2001-01-01T09:00:00"}}, 422),
        ({"context_mode": "reuse_thread"}, 422),
        ({"context_mode": "reuse_thread", "thread_id": "no-such-thread"}, 404),
        ({"prompt": ""}, 422),
    ],
)
async def test_bad_tasks_are_refused_and_nothing_is_written(url: str, fields: dict[str, Any], status: int) -> None:  # noqa: F811
    async with httpx.AsyncClient(base_url=url) as api:
        before = (await api.get("/api/scheduled-tasks")).json()
        assert (await api.post("/api/scheduled-tasks", json=task(**fields))).status_code == status
        assert (await api.get("/api/scheduled-tasks")).json() == before


async def test_the_cli_creates_lists_pauses_resumes_triggers_and_deletes(
    url: str,  # noqa: F811
    api_config: Any,  # noqa: F811
    tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config_file = tmp_path / "hartflow.yaml"
    config_file.write_text(json.dumps(api_config.model_dump(mode="json")), encoding="utf-8")

    async def cli(*args: str) -> tuple[int, Any]:
        # In a thread of its own, as from a shell: the command runs its own event loop.
        code = await asyncio.to_thread(run_command, [*args, "--config", str(config_file), "--json"])
        out, _ = capsys.readouterr()
        return code, json.loads(out) if out.strip() else None

    code, created = await cli("schedule", "create", "nightly report", "--every", "1h", "--tz", "Europe/Paris")
    assert code == 0 and created["schedule"] == "@every 1h" and created["enabled"] is True
    cron_id = created["cron_id"]

    async def listed() -> bool:
        return any(s["cron_id"] == cron_id for s in (await cli("schedule", "list"))[1]["schedules"])

    await eventually_async(listed, what="the schedule listed")
    assert (await cli("schedule", "pause", cron_id))[1]["enabled"] is False
    assert (await cli("schedule", "resume", cron_id))[1]["enabled"] is True
    assert (await cli("schedule", "trigger", cron_id)) == (0, {"cron_id": cron_id, "triggered": True})
    async with httpx.AsyncClient(base_url=url) as api:

        async def started() -> bool:
            fires = (await api.get(f"/runs/crons/{cron_id}")).json()["recent_fires"]
            return bool(fires) and fires[0]["outcome"] == "started"

        await eventually_async(started, timeout=60, what="the CLI's trigger to start a run")
    assert (await cli("schedule", "delete", cron_id)) == (0, {"cron_id": cron_id, "deleted": True})
    assert (await cli("schedule", "delete", cron_id))[0] == 2
    assert (await cli("schedule", "create", "x", "--cron", "nope"))[0] == 2
    assert (await cli("schedule", "create", "x"))[0] == 2
