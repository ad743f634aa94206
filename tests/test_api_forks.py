"""Checkpoints, forks and state edits through ``langgraph-sdk`` and DeerFlow's own requests, on a real uvicorn, worker,
Temporal and storage: Agent Chat UI's regenerate and edit (``src/components/thread/messages/{ai,human}.tsx``: the
parent checkpoint of the message's first-seen state, ``src/components/thread/index.tsx``: ``handleRegenerate``),
DeerFlow's rename (``frontend/src/core/threads/hooks.ts``: ``useRenameThread`` → ``threads.updateState``), its
regenerate / edit-and-rerun prepare routes and branches (``hooks.ts``: ``regenerateMessage``,
``editAndRegenerateMessage``; ``frontend/src/core/threads/api.ts``: ``branchThreadFromTurn``), ``threads.copy``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import ConflictError, NotFoundError, UnprocessableEntityError
from temporalio.client import Client

from tests.support import model_specs
from workers.config import HartflowConfig
from workers.testing import answer, make_config, running_worker, serving_api, unique, write_script
from workers.worker import connect


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


@pytest.fixture
def scripts_dir(tmp_path: Path) -> Path:
    return tmp_path


def model(scripts_dir: Path, text: str, **extra: Any) -> dict[str, str]:
    """The run context choosing a scripted model that answers ``text``."""
    return {"model_name": write_script(scripts_dir, [{**answer(text), **extra}])}


@pytest.fixture
async def url(home: Path, temporal_address: str, scripts_dir: Path, client: Client) -> AsyncIterator[str]:
    config: HartflowConfig = make_config(
        home,
        temporal_address,
        model=write_script(scripts_dir, [answer("default answer")]),
        api=model_specs(scripts_dir),
    )
    async with running_worker(client, config), serving_api(config, await connect(config)) as base:
        yield base


def visible(values: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [
        m
        for m in values["messages"]
        if m["type"] == kind and not (m.get("additional_kwargs") or {}).get("hide_from_ui")
    ]


def first_seen(history: list[dict[str, Any]], message_id: str) -> dict[str, Any]:
    """useStream's ``getMessagesMetadata``: the oldest state of the (newest first) history holding the message."""
    return [s for s in history if message_id in {m["id"] for m in s["values"]["messages"]}][-1]


async def versions(sdk: Any, thread_id: str) -> list[str]:
    return [s["checkpoint"]["checkpoint_id"] for s in await sdk.threads.get_history(thread_id, limit=100)]


async def two_turns(sdk: Any, scripts_dir: Path) -> str:
    thread = await sdk.threads.create()
    await sdk.runs.wait(thread["thread_id"], "hartflow", input=user("one"), context=model(scripts_dir, "answer one"))
    await sdk.runs.wait(thread["thread_id"], "hartflow", input=user("two"), context=model(scripts_dir, "answer two"))
    return str(thread["thread_id"])


async def test_history_is_a_tree_and_agent_chat_ui_regenerates_and_edits_from_its_checkpoints(
    url: str, scripts_dir: Path
) -> None:
    sdk = get_client(url=url)
    thread_id = await two_turns(sdk, scripts_dir)
    history = await sdk.threads.get_history(thread_id, limit=100)
    links = {s["checkpoint"]["checkpoint_id"]: (s["parent_checkpoint"] or {}).get("checkpoint_id") for s in history}
    assert links == {"v2": "v2-input", "v2-input": "v1", "v1": "v1-input", "v1-input": "v0", "v0": None}
    assert history[0] == await sdk.threads.get_state(thread_id)
    assert await sdk.threads.get_state(thread_id, checkpoint_id="v2-input") == history[1]

    # Regenerate "answer two": the answer's first-seen state's parent, no input.
    answer_two = visible(history[0]["values"], "ai")[-1]
    parent = first_seen(history, answer_two["id"])["parent_checkpoint"]
    assert parent["checkpoint_id"] == "v2-input"
    parts = [
        part
        async for part in sdk.runs.stream(
            thread_id, "hartflow", input=None, checkpoint=parent, context=model(scripts_dir, "answer two again")
        )
    ]
    assert parts[-1].event == "end"
    state = await sdk.threads.get_state(thread_id)
    assert [m["content"] for m in visible(state["values"], "ai")] == ["answer one", "answer two again"]
    assert [m["id"] for m in visible(state["values"], "human")] == [
        m["id"] for m in visible(history[0]["values"], "human")
    ]
    assert state["checkpoint"]["checkpoint_id"] == "v3" and state["parent_checkpoint"]["checkpoint_id"] == "v2-input"
    kept = await sdk.threads.get_state(thread_id, checkpoint_id="v2")
    assert visible(kept["values"], "ai")[-1]["content"] == "answer two", "the older branch stays readable"

    # Edit "two": the human message's first-seen state's parent, with the new message.
    history = await sdk.threads.get_history(thread_id, limit=100)
    two = visible(history[0]["values"], "human")[-1]
    parent = first_seen(history, two["id"])["parent_checkpoint"]
    assert parent["checkpoint_id"] == "v1"
    await sdk.runs.wait(
        thread_id, "hartflow", input=user("TWO, edited"), checkpoint_id="v1", context=model(scripts_dir, "edited")
    )
    state = await sdk.threads.get_state(thread_id)
    assert [m["content"] for m in visible(state["values"], "human")] == ["one", "TWO, edited"]
    assert [m["content"] for m in visible(state["values"], "ai")] == ["answer one", "edited"]
    assert (await sdk.threads.get_state(thread_id, checkpoint_id="v4-input"))["parent_checkpoint"][
        "checkpoint_id"
    ] == "v1"
    for older, text in (("v2", "answer two"), ("v3", "answer two again")):
        values = (await sdk.threads.get_state(thread_id, checkpoint_id=older))["values"]
        assert visible(values, "ai")[-1]["content"] == text

    # The head of the shown branch (what useStream sends on every submit) is an ordinary run.
    await sdk.runs.wait(thread_id, "hartflow", input=user("three"), checkpoint_id="v4")
    assert (await sdk.threads.get_state(thread_id))["parent_checkpoint"]["checkpoint_id"] == "v5-input"


async def test_a_checkpoint_run_that_cannot_be_served_is_refused_and_writes_nothing(
    url: str, scripts_dir: Path
) -> None:
    sdk = get_client(url=url)
    thread_id = await two_turns(sdk, scripts_dir)
    before = await versions(sdk, thread_id)
    refusals = [
        ({"checkpoint_id": "v99-input"}, 404, "not kept"),
        ({"input": user("x"), "checkpoint_id": "nope"}, 404, "not kept"),
        ({"checkpoint_id": "v1"}, 422, "nothing to run from v1"),
        ({"input": user("x"), "checkpoint": {"checkpoint_id": "v2-input"}}, 422, "already holds its run's message"),
        ({"checkpoint": {"checkpoint_id": 7}}, 422, "checkpoint_id must be text"),
    ]
    async with httpx.AsyncClient(base_url=url) as http:
        for body, status, detail in refusals:
            answered = await http.post(f"/threads/{thread_id}/runs/stream", json={"assistant_id": "hartflow", **body})
            assert (answered.status_code, detail in answered.json()["detail"]) == (status, True), body
    assert await versions(sdk, thread_id) == before
    assert len(await sdk.runs.list(thread_id)) == 2


async def test_update_state_renames_as_a_new_version_and_refuses_bad_values_busy_threads_and_strangers(
    url: str, scripts_dir: Path, tmp_path: Path
) -> None:
    sdk = get_client(url=url)
    thread_id = await two_turns(sdk, scripts_dir)
    answered = await sdk.threads.update_state(thread_id, {"title": "Renamed"})
    assert answered["checkpoint"]["checkpoint_id"] == "v3"
    state = await sdk.threads.get_state(thread_id)
    assert state["values"]["title"] == "Renamed" and state["metadata"]["source"] == "update"
    assert state["parent_checkpoint"]["checkpoint_id"] == "v2" and len(state["values"]["messages"]) > 0
    assert (await sdk.threads.search(ids=[thread_id]))[0]["values"]["title"] == "Renamed"

    before = await versions(sdk, thread_id)
    for values in ({"nope": 1}, {"title": 5}, {"sandbox": {"sandbox_id": "x"}}, {"messages": [{"type": "??"}]}):
        with pytest.raises(UnprocessableEntityError):
            await sdk.threads.update_state(thread_id, values)
    with pytest.raises(NotFoundError):
        await sdk.threads.update_state(thread_id, {"title": "x"}, checkpoint_id="v77")
    with pytest.raises(NotFoundError):
        await sdk.threads.update_state(unique("nobodys"), {"title": "x"})
    assert await versions(sdk, thread_id) == before

    gate = tmp_path / "gate"
    held = model(scripts_dir, "late", wait_for_file=str(gate))
    run = await sdk.runs.create(thread_id, "hartflow", input=user("slow"), context=held)
    with pytest.raises(ConflictError):
        await sdk.threads.update_state(thread_id, {"title": "while running"})
    gate.touch()
    await sdk.runs.join(thread_id, run["run_id"])
    assert (await sdk.threads.get_state(thread_id))["values"]["title"] == "Renamed"


async def test_copy_starts_a_new_thread_from_the_newest_version(url: str, scripts_dir: Path) -> None:
    sdk = get_client(url=url)
    thread_id = await two_turns(sdk, scripts_dir)
    async with httpx.AsyncClient(base_url=url) as http:
        copied = (await http.post(f"/threads/{thread_id}/copy")).json()
        assert (await http.post(f"/threads/{unique('nobodys')}/copy")).status_code == 404
    assert copied["thread_id"] != thread_id
    assert copied["values"]["messages"] == (await sdk.threads.get_state(thread_id))["values"]["messages"]
    state = await sdk.threads.get_state(copied["thread_id"])
    assert state["checkpoint"]["checkpoint_id"] == "v1" and state["metadata"]["source"] == "fork"
    await sdk.runs.wait(copied["thread_id"], "hartflow", input=user("three"))
    assert len(await versions(sdk, thread_id)) == 5, "the source is untouched"


async def test_deerflow_regenerate_edit_and_branch_with_the_bodies_the_app_sends(url: str, scripts_dir: Path) -> None:
    sdk = get_client(url=url)
    thread_id = await two_turns(sdk, scripts_dir)
    await sdk.threads.update_state(thread_id, {"title": "Kept title"})
    values = (await sdk.threads.get_state(thread_id))["values"]
    answer_two, two = visible(values, "ai")[-1], visible(values, "human")[-1]
    async with httpx.AsyncClient(base_url=f"{url}/api") as http:
        prepared = (
            await http.post(f"/threads/{thread_id}/runs/regenerate/prepare", json={"message_id": answer_two["id"]})
        ).json()
        assert prepared["checkpoint"]["checkpoint_id"] == "v1" and prepared["target_run_id"]
        assert prepared["input"]["title"] == "Kept title"
        assert [m["content"][0]["text"] for m in prepared["input"]["messages"]] == ["two"]
        refusals = [
            (await http.post(f"/threads/{thread_id}/runs/regenerate/prepare", json={"message_id": two["id"]}), 409),
            (await http.post(f"/threads/{thread_id}/runs/regenerate/prepare", json={"message_id": "gone"}), 404),
            (await http.post(f"/threads/{thread_id}/runs/regenerate/prepare", json={}), 422),
            (await http.post(f"/threads/{unique('nobodys')}/runs/regenerate/prepare", json={"message_id": "x"}), 404),
        ]
        assert [r.status_code for r, _ in refusals] == [code for _, code in refusals]

        await sdk.runs.wait(
            thread_id,
            "hartflow",
            input=prepared["input"],
            checkpoint=prepared["checkpoint"],
            metadata=prepared["metadata"],
            context=model(scripts_dir, "regenerated"),
        )
        state = await sdk.threads.get_state(thread_id)
        assert [m["content"] for m in visible(state["values"], "ai")] == ["answer one", "regenerated"]
        assert state["values"]["title"] == "Kept title"
        assert state["parent_checkpoint"]["checkpoint_id"] == "v2-input", "a sibling of the answer it replaced"

        two = visible(state["values"], "human")[-1]
        edit = {"human_message_id": two["id"], "replacement_text": "two, edited"}
        prepared = (await http.post(f"/threads/{thread_id}/runs/edit-regenerate/prepare", json=edit)).json()
        assert prepared["checkpoint"]["checkpoint_id"] == "v1" and two["id"] in prepared["source_message_ids"]
        assert prepared["input"]["messages"][0]["id"] == prepared["replacement_human_message_id"]
        unchanged = {"human_message_id": two["id"], "replacement_text": "two"}
        assert (
            await http.post(f"/threads/{thread_id}/runs/edit-regenerate/prepare", json=unchanged)
        ).status_code == 409
        assert (
            await http.post(f"/threads/{thread_id}/runs/edit-regenerate/prepare", json={"human_message_id": "x"})
        ).status_code == 422
        await sdk.runs.wait(
            thread_id,
            "hartflow",
            input=prepared["input"],
            checkpoint=prepared["checkpoint"],
            context=model(scripts_dir, "edited"),
        )
        state = await sdk.threads.get_state(thread_id)
        assert [m["content"] for m in visible(state["values"], "human")][-1] == "two, edited"
        assert [m["content"] for m in visible(state["values"], "ai")] == ["answer one", "edited"]

        one = visible(state["values"], "ai")[0]
        branch = (
            await http.post(
                f"/threads/{thread_id}/branches", json={"message_id": one["id"], "message_ids": [one["id"]]}
            )
        ).json()
        assert branch["parent_thread_id"] == thread_id and branch["parent_checkpoint_id"] == "v1"
        assert branch["branched_from_message_id"] == one["id"] and branch["workspace_clone_mode"]
        assert (await http.post(f"/threads/{thread_id}/branches", json={"message_id": "gone"})).status_code == 404
        assert (await http.post(f"/threads/{thread_id}/branches", json={})).status_code == 422
    branched = await sdk.threads.get(branch["thread_id"])
    assert branched["metadata"]["branch_parent_thread_id"] == thread_id
    assert [m["content"] for m in visible(branched["values"], "ai")] == ["answer one"]
    await sdk.runs.wait(branch["thread_id"], "hartflow", input=user("on the branch"))
    assert len(visible((await sdk.threads.get_state(branch["thread_id"]))["values"], "ai")) == 2
