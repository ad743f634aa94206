"""``GET /threads/{id}/messages/page`` (issue 26, row 1): DeerFlow's paged history from the committed state, as
the app pages it (``frontend/src/core/threads/hooks.ts``: ``useThreadHistory``, ``buildThreadMessagesPageUrl``,
``parseThreadMessagesPageResponse``, ``getThreadHistoryNextPageParam``, ``flattenThreadHistoryPages``). Real
server, worker, Temporal and storage; the model is scripted. Bob (bearer auth) gets 404 for alice's thread."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from tests.support import worker_and_api
from tests.support.tenants import as_user, bearer_api
from workers.config import HartflowConfig
from workers.testing import answer, ask_clarification, calls, make_config, tool_call, unique, write_script


@pytest.fixture
def api_config(home: Path, temporal_address: str, tmp_path: Path) -> HartflowConfig:
    model = write_script(tmp_path, [answer("noted")])
    return make_config(home, temporal_address, model=model, api=bearer_api(tmp_path))


@pytest.fixture
async def url(api_config: HartflowConfig, client: Client) -> AsyncIterator[str]:
    async with worker_and_api(api_config, client) as base:
        yield base


async def run(http: httpx.AsyncClient, thread_id: str, body: dict[str, Any]) -> str:
    """One run, waited for; its API run id (the ``Content-Location`` the SDK reads)."""
    done = await http.post(f"/api/threads/{thread_id}/runs/wait", json={"assistant_id": "lead_agent", **body})
    assert done.status_code == 200, done.text
    return done.headers["Content-Location"].rsplit("/", 1)[1]


def said(text: str, script: str | None = None) -> dict[str, Any]:
    message = {"type": "human", "content": [{"type": "text", "text": text}]}
    return {"input": {"messages": [message]}, "context": {"model_name": script} if script else {}}


async def page(http: httpx.AsyncClient, thread_id: str, **params: Any) -> dict[str, Any]:
    answered = await http.get(f"/api/threads/{thread_id}/messages/page", params=params)
    assert answered.status_code == 200, answered.text
    body: dict[str, Any] = answered.json()
    assert set(body) == {"data", "has_more", "next_before_seq"}
    return body


async def walk(http: httpx.AsyncClient, thread_id: str, limit: int) -> list[dict[str, Any]]:
    """Every page, newest first, as ``useInfiniteQuery`` fetches them; flattened as the app does."""
    pages, before = [], None
    while True:
        params = {"limit": limit} if before is None else {"limit": limit, "before_seq": before}
        current = await page(http, thread_id, **params)
        pages.append(current)
        if not current["has_more"]:
            assert current["next_before_seq"] is None
            break
        assert current["next_before_seq"] == current["data"][0]["seq"]
        before = current["next_before_seq"]
    return [row for current in reversed(pages) for row in current["data"]]


async def test_history_pages_newest_first_with_stable_seqs_and_each_turns_run(url: str, tmp_path: Path) -> None:
    thread_id = unique("t")
    with_tool = write_script(tmp_path, [calls(tool_call("bash", command="echo hi")), answer("second answer")])
    asking = write_script(tmp_path, [ask_clarification("Which colour?", options=["red", "blue"]), answer("blue it is")])
    async with as_user(url, "alice") as alice:
        assert (await alice.post("/api/threads", json={"thread_id": thread_id})).status_code == 200
        first = await run(alice, thread_id, said("first"))
        second = await run(alice, thread_id, said("second", with_tool))
        third = await run(alice, thread_id, said("third", asking))
        resumed = await run(alice, thread_id, {"command": {"resume": "blue"}})

        full = await page(alice, thread_id, limit=200)
        rows = full["data"]
        assert (full["has_more"], full["next_before_seq"]) == (False, None)
        seqs = [row["seq"] for row in rows]
        assert seqs == sorted(set(seqs)) and seqs[0] >= 1, "oldest first, thread-global, unique"
        for row in rows:
            assert set(row) == {"run_id", "seq", "content", "metadata", "created_at"}
            assert row["content"]["type"] in ("human", "ai", "tool")
            assert row["metadata"] == ({} if row["content"]["type"] == "tool" else {"caller": "lead_agent"})

        humans = [row for row in rows if row["content"]["type"] == "human"]
        assert [h["content"]["content"] for h in humans[:3]] == ["first", "second", "third"]
        [reply] = humans[3:]
        assert reply["content"]["additional_kwargs"]["human_input_response"]["value"] == "blue"
        assert all(not h["content"]["additional_kwargs"].get("hide_from_ui") for h in humans[:3]), (
            "hidden reminders are no rows; the clarification answer is"
        )
        by_run = [(row["run_id"], row["content"]["type"]) for row in rows]
        assert [run_id for run_id, kind in by_run if kind == "human"] == [first, second, third, resumed]
        assert [run_id for run_id, kind in by_run if kind == "tool"] == [second, third], "bash, then the question"
        assert rows[-1]["run_id"] == resumed and rows[-1]["content"]["content"] == "blue it is"

        assert await walk(alice, thread_id, limit=2) == rows, "pages of 2 put together are the whole history"
        newest = await page(alice, thread_id, limit=3)
        assert newest["data"] == rows[-3:] and newest["has_more"]
        assert (await alice.get(f"/threads/{thread_id}/messages/page", params={"limit": 3})).json() == newest

        cursor = newest["next_before_seq"]
        await run(alice, thread_id, said("fourth"))
        older = await page(alice, thread_id, limit=200, before_seq=cursor)
        assert older["data"] == [row for row in rows if row["seq"] < cursor], "a later run moves no older seq"
        assert (await page(alice, thread_id, limit=1))["data"][0]["content"]["content"] == "noted"


@pytest.mark.parametrize(
    "params",
    [
        {"limit": "0"},
        {"limit": "201"},
        {"limit": "many"},
        {"before_seq": "0"},
        {"before_seq": "-3"},
        {"before_seq": "x1"},
        {"before_seq": str(2**63)},
        {"after_seq": "1"},
    ],
)
async def test_bad_cursors_and_limits_are_422(url: str, params: dict[str, str]) -> None:
    async with as_user(url, "alice") as alice:
        thread_id = (await alice.post("/api/threads", json={})).json()["thread_id"]
        refused = await alice.get(f"/api/threads/{thread_id}/messages/page", params=params)
        assert refused.status_code == 422, refused.text


async def test_an_unknown_or_another_users_thread_is_404(url: str) -> None:
    async with as_user(url, "alice") as alice, as_user(url, "bob") as bob:
        thread_id = (await alice.post("/api/threads", json={})).json()["thread_id"]
        await run(alice, thread_id, said("mine"))
        assert len((await page(alice, thread_id))["data"]) >= 2
        assert (await bob.get(f"/api/threads/{thread_id}/messages/page")).status_code == 404
        assert (await alice.get(f"/api/threads/{unique('t')}/messages/page")).status_code == 404
        assert (await alice.get("/api/threads/a..b/messages/page")).status_code == 422
        empty = await page(alice, (await alice.post("/api/threads", json={})).json()["thread_id"])
        assert empty == {"data": [], "has_more": False, "next_before_seq": None}
