"""Settings → Memory: the requests of DeerFlow's ``frontend/src/core/memory/api.ts`` (through ``hooks.ts`` and
``components/workspace/settings/memory-settings-page.tsx``) and the shapes of its ``types.ts`` (``UserMemory``),
bad input, another user's memory, an edit made while an extraction runs, and ``hartflow memory``. Real server,
worker, Temporal and storage; the model is scripted."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.service import RPCError

from activities.memory_store import load_memory, save_memory
from tests.support import storage_settings, wait_for_history_event, worker_and_api
from tests.support.tenants import TOKENS, as_user, bearer_api
from vocabulary.contracts import MEMORY_WORKFLOW_ID_PREFIX
from vocabulary.contracts.memory import empty_memory
from workers.cli import run_command
from workers.config import HartflowConfig, open_object_store
from workers.testing import answer, make_config, unique, write_script
from workers.testing.api_server import write_config
from workers.testing.history import replay

EXTRACTED = {
    "user": {"workContext": {"summary": "Go developer at Acme", "shouldUpdate": True}},
    "history": {},
    "newFacts": [{"content": "Writes Go at Acme", "category": "context", "confidence": 0.95}],
    "factsToRemove": [],
}


@pytest.fixture
def storage(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Filesystem storage; a test marked ``parametrize("storage", [...], indirect=True)`` also runs on S3."""
    return storage_settings(request, getattr(request, "param", "filesystem"))


@pytest.fixture
def users() -> dict[str, str]:
    """Role (``alice``, ``bob``: ``tests/support/tenants.py``) → this test's user id: a memory workflow
    (``hartflow-memory-{user}``) is one per user on the Temporal server every test shares, so tests running side by
    side must not share users."""
    return {role: unique(role) for role in TOKENS}


@pytest.fixture
def api_config(
    home: Path, temporal_address: str, tmp_path: Path, storage: dict[str, Any], users: dict[str, str]
) -> HartflowConfig:
    return make_config(
        home,
        temporal_address,
        storage=storage,
        model=write_script(tmp_path, [answer("fine")]),
        api=bearer_api(tmp_path, users=users),
        run={"middlewares": {"memory": {"debounce_seconds": 0.2}}},
    )


@pytest.fixture
async def url(api_config: HartflowConfig, client: Client, users: dict[str, str]) -> AsyncIterator[str]:
    async with worker_and_api(api_config, client) as base:
        yield base
    for user in users.values():  # the users' memory workflows wait for conversations forever
        with contextlib.suppress(RPCError):  # never started
            await client.get_workflow_handle(f"{MEMORY_WORKFLOW_ID_PREFIX}{user}").terminate("test finished")


def assert_user_memory_shape(memory: dict[str, Any]) -> None:
    """What ``types.ts``'s ``UserMemory`` reads."""
    assert isinstance(memory["version"], str) and isinstance(memory["lastUpdated"], str)
    for group, names in (
        ("user", ("workContext", "personalContext", "topOfMind")),
        ("history", ("recentMonths", "earlierContext", "longTermBackground")),
    ):
        for name in names:
            assert set(memory[group][name]) == {"summary", "updatedAt"}
    for fact in memory["facts"]:
        assert {"id", "content", "category", "confidence", "createdAt", "source"} <= set(fact)


@pytest.mark.parametrize("storage", ["filesystem", "s3"], indirect=True)
async def test_the_memory_page_views_edits_deletes_clears_exports_and_imports(url: str) -> None:
    async with as_user(url, "alice") as api:
        loaded = (await api.get("/api/memory")).json()  # loadMemory
        assert_user_memory_shape(loaded)
        assert loaded["facts"] == []

        created = await api.post(  # createMemoryFact: MemoryFactInput
            "/api/memory/facts", json={"content": "Prefers tea", "category": "preference", "confidence": 0.8}
        )
        assert created.status_code == 200, created.text
        [fact] = created.json()["facts"]
        assert (fact["content"], fact["category"], fact["confidence"], fact["source"]) == (
            "Prefers tea",
            "preference",
            0.8,
            "manual",
        )
        assert_user_memory_shape(created.json())

        patched = await api.patch(f"/api/memory/facts/{fact['id']}", json={"content": "Prefers green tea"})
        assert patched.status_code == 200, patched.text
        assert patched.json()["facts"][0] | {"content": "x"} == fact | {"content": "x"}, "omitted fields are kept"
        assert patched.json()["facts"][0]["content"] == "Prefers green tea"

        exported = (await api.get("/api/memory/export")).json()  # exportMemory
        assert exported == (await api.get("/api/memory")).json()

        deleted = await api.delete(f"/api/memory/facts/{fact['id']}")  # deleteMemoryFact
        assert deleted.status_code == 200 and deleted.json()["facts"] == []

        imported = await api.post("/api/memory/import", json=exported)  # importMemory: a file exportMemory wrote
        assert imported.status_code == 200, imported.text
        assert [f["content"] for f in imported.json()["facts"]] == ["Prefers green tea"]
        assert (await api.get("/api/memory")).json()["facts"] == imported.json()["facts"]

        cleared = await api.delete("/api/memory")  # clearMemory
        assert cleared.status_code == 200 and cleared.json()["facts"] == []
        assert_user_memory_shape(cleared.json())


async def test_bad_input_is_refused_and_writes_nothing(
    url: str, api_config: HartflowConfig, users: dict[str, str]
) -> None:
    store = open_object_store(api_config)
    key = f"users/{users['alice']}/memory.json"
    async with as_user(url, "alice") as api:
        made = await api.post("/api/memory/facts", json={"content": "Uses vim", "category": "preference"})
        fact_id = made.json()["facts"][0]["id"]
        before = store.get(key)
        refused = {
            ("POST", "/api/memory/facts", json.dumps({})): 422,
            ("POST", "/api/memory/facts", json.dumps({"content": ""})): 422,
            ("POST", "/api/memory/facts", json.dumps({"content": "x", "confidence": 2})): 422,
            ("POST", "/api/memory/facts", json.dumps({"content": "x", "extra": 1})): 422,
            ("POST", "/api/memory/facts", "not json"): 422,
            ("POST", "/api/memory/facts", json.dumps({"content": "  uses VIM "})): 409,
            ("PATCH", f"/api/memory/facts/{fact_id}", json.dumps({"confidence": -1})): 422,
            ("PATCH", f"/api/memory/facts/{fact_id}", json.dumps({"content": "   "})): 422,
            ("PATCH", "/api/memory/facts/fact_nobody", json.dumps({"content": "y"})): 404,
            ("DELETE", "/api/memory/facts/fact_nobody", None): 404,
            ("POST", "/api/memory/import", json.dumps({"facts": "all"})): 422,
            ("POST", "/api/memory/import", json.dumps({"facts": [{"id": "a", "content": "x", "confidence": 5}]})): 422,
            ("POST", "/api/memory/import", json.dumps({"facts": [{"id": "a", "content": "x"}] * 2})): 422,
            ("POST", "/api/memory/import", json.dumps({"user": {"workContext": {"summary": 3}}})): 422,
        }
        for (method, path, body), status in refused.items():
            headers = {"Content-Type": "application/json"}
            response = await api.request(method, path, content=body, headers=headers)
            assert response.status_code == status, (method, path, body, response.text)
            assert isinstance(response.json()["detail"], str)  # readMemoryResponse shows it
        assert store.get(key) == before


async def test_each_user_has_their_own_memory(url: str, api_config: HartflowConfig, users: dict[str, str]) -> None:
    store = open_object_store(api_config)
    key = f"users/{users['alice']}/memory.json"
    alices = empty_memory()
    alices["user"]["workContext"]["summary"] = "alice's secret project"
    save_memory(store, users["alice"], alices)
    async with as_user(url, "alice") as alice, as_user(url, "bob") as bob:
        fact_id = (await alice.post("/api/memory/facts", json={"content": "alice's secret"})).json()["facts"][0]["id"]
        before = store.get(key)
        assert "secret" not in (await bob.get("/api/memory")).text
        assert "secret" not in (await bob.get("/api/memory/export")).text
        assert (await bob.patch(f"/api/memory/facts/{fact_id}", json={"content": "mine"})).status_code == 404
        assert (await bob.delete(f"/api/memory/facts/{fact_id}")).status_code == 404
        assert (await bob.delete("/api/memory")).status_code == 200  # his own
        assert (await bob.post("/api/memory/import", json={"facts": []})).status_code == 200
        assert store.get(key) == before
        assert (await alice.get("/api/memory")).json()["user"]["workContext"]["summary"] == "alice's secret project"
        async with httpx.AsyncClient(base_url=url) as nobody:
            assert (await nobody.get("/api/memory")).status_code == 401


async def test_an_edit_made_during_an_extraction_is_kept(
    url: str, api_config: HartflowConfig, client: Client, tmp_path: Path, users: dict[str, str]
) -> None:
    """The memory workflow reads the memory, then waits on the model (held by a file); the user adds a fact
    meanwhile (answered at once); the extraction's save keeps it."""
    gate = tmp_path / "release-extraction"
    model = write_script(
        tmp_path,
        [answer("noted"), {"for": "memory", "content": json.dumps(EXTRACTED), "wait_for_file": str(gate)}],
    )
    memory = client.get_workflow_handle(f"{MEMORY_WORKFLOW_ID_PREFIX}{users['alice']}")
    async with as_user(url, "alice") as api:
        thread_id = (await api.post("/threads", json={})).json()["thread_id"]
        ran = await api.post(
            f"/threads/{thread_id}/runs/wait",
            json={
                "input": {"messages": [{"role": "user", "content": "I write Go at Acme"}]},
                "context": {"model_name": model},
            },
        )
        assert ran.status_code == 200, ran.text
        await wait_for_history_event(memory, lambda e: _scheduled(e, "model.invoke"))

        edited = await api.post("/api/memory/facts", json={"content": "Prefers short answers", "confidence": 0.9})
        assert edited.status_code == 200, edited.text
        assert [f["content"] for f in edited.json()["facts"]] == ["Prefers short answers"]

        gate.touch()
        save_ids, saved = set(), 0
        async for event in memory.fetch_history_events(wait_new_event=True):
            if _scheduled(event, "memory.save"):
                save_ids.add(event.event_id)
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                saved += event.activity_task_completed_event_attributes.scheduled_event_id in save_ids
                if saved == 2:  # the edit's save, then the extraction's
                    break
        final = (await api.get("/api/memory")).json()
    await replay(client, memory)  # the edit beside the extraction replays deterministically
    assert sorted(f["content"] for f in final["facts"]) == ["Prefers short answers", "Writes Go at Acme"]
    assert final["user"]["workContext"]["summary"] == "Go developer at Acme"


def _scheduled(event: Any, activity: str) -> bool:
    return bool(
        event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and event.activity_task_scheduled_event_attributes.activity_type.name == activity
    )


async def test_hartflow_memory_commands(
    url: str, api_config: HartflowConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str], users: dict[str, str]
) -> None:
    alice, bob = users["alice"], users["bob"]
    config_file = write_config(api_config.model_copy(update={"user_id": alice}), tmp_path, "alice.yaml")
    store = open_object_store(api_config)
    key = f"users/{alice}/memory.json"

    async def hartflow(*argv: str) -> tuple[int, str]:
        capsys.readouterr()
        code = await asyncio.to_thread(run_command, [*argv, "--config", str(config_file)])
        return code, capsys.readouterr().out

    imported = tmp_path / "memory.json"
    imported.write_text(json.dumps({"facts": [{"id": "fact_1", "content": "Likes maps", "confidence": 0.7}]}))
    assert (await hartflow("memory", "import", str(imported), "--json"))[0] == 0
    code, out = await hartflow("memory", "show", "--json")
    assert code == 0 and [f["content"] for f in json.loads(out)["facts"]] == ["Likes maps"]
    code, out = await hartflow(
        "memory", "edit", "fact_1", "--content", "Likes old maps", "--confidence", "0.9", "--json"
    )
    assert code == 0 and json.loads(out)["facts"][0] | {"createdAt": ""} == {
        "id": "fact_1",
        "content": "Likes old maps",
        "category": "context",
        "confidence": 0.9,
        "createdAt": "",
        "source": "unknown",
    }
    code, out = await hartflow("memory", "export")
    assert code == 0 and json.loads(out)["facts"] == load_memory(store, alice)["facts"]

    before = store.get(key)
    for refused in (
        ("memory", "edit", "fact_nobody", "--content", "x"),
        ("memory", "edit", "fact_1"),
        ("memory", "edit", "fact_1", "--confidence", "3"),
        ("memory", "delete", "fact_nobody"),
        ("memory", "clear"),
        ("memory", "import", str(tmp_path / "missing.json")),
    ):
        assert (await hartflow(*refused))[0] == 2, refused
    assert store.get(key) == before

    assert (await hartflow("memory", "delete", "fact_1"))[0] == 0
    assert load_memory(store, alice)["facts"] == []
    assert (await hartflow("memory", "clear", "--yes"))[0] == 0
    assert load_memory(store, bob) == empty_memory(), "bob's memory was never touched"
