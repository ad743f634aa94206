"""DeerFlow's subagent cards, retry toasts, model picker and token counter on the Agent Server API (issue 26, rows
6 and 7): custom events carry DeerFlow's ``type`` beside ``kind``, a subagent's steps arrive live as
``task_running`` events, ``GET …/runs/{run}/events`` serves them after the run, ``GET /api/models`` reports the
shorthand's configured capabilities and ``token_usage.enabled``, ``GET …/token-usage`` the thread's totals.

Real uvicorn, worker, Temporal and storage, with bearer tokens (alice and bob); the models are scripted. Each
request is the one DeerFlow's app sends, cited in the test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from tests.support.tenants import as_user, bearer_api, sdk_as
from workers.config import ConfigError, HartflowConfig, load_config
from workers.testing import (
    answer,
    ask_clarification,
    calls,
    make_config,
    running_worker,
    serving_api,
    tool_call,
    write_script,
)

CHILD_USAGE = {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10}
LEAD_USAGE = {"input_tokens": 20, "output_tokens": 5, "total_tokens": 25}


@pytest.fixture
def config(home: Path, temporal_address: str) -> HartflowConfig:
    child = write_script(
        home,
        [
            calls(tool_call("ls", "c1", path="/mnt/user-data/workspace"), content="let me look"),
            {**answer("child report"), "usage_metadata": CHILD_USAGE},
        ],
    )
    lead = write_script(
        home,
        [
            {
                **calls(tool_call("task", "t1", description="look around", prompt="list it")),
                "usage_metadata": LEAD_USAGE,
            },
            {**answer("all done"), "usage_metadata": LEAD_USAGE},
        ],
    )
    return make_config(
        home,
        temporal_address,
        model=lead,
        api=bearer_api(),
        run={"subagent_enabled": True, "subagents": {"model": child}},
    )


@pytest.fixture
async def url(config: HartflowConfig, client: Client) -> AsyncIterator[str]:
    async with running_worker(client, config), serving_api(config, client) as base:
        yield base


async def delegated_run(url: str) -> tuple[str, str, list[dict[str, Any]]]:
    """A streamed run whose lead delegates one task (``t1``): its thread, its run id and its custom events, as
    DeerFlow's app streams a chat (``frontend/src/core/threads/hooks.ts``: ``streamMode`` with ``custom``)."""
    sdk = sdk_as(url, "alice")
    thread_id = (await sdk.threads.create())["thread_id"]
    run_id = ""
    custom: list[dict[str, Any]] = []
    parts = sdk.runs.stream(
        thread_id,
        "lead_agent",
        input={"messages": [{"role": "user", "content": "delegate it"}]},
        stream_mode=["values", "custom"],
    )
    async for part in parts:
        if part.event == "metadata":
            run_id = part.data["run_id"]
        elif part.event == "custom":
            custom.append(part.data)
    return thread_id, run_id, custom


async def test_a_subagents_steps_stream_live_and_are_served_after_the_run(url: str) -> None:
    """Live: ``onCustomEvent`` in ``frontend/src/core/threads/hooks.ts`` reads ``type`` and hands ``task_*`` events
    to ``taskEventToSubtaskUpdate`` (``frontend/src/core/tasks/lifecycle.ts``: ``task_id``, ``model_name``,
    ``usage``) and ``task_running``'s ``message`` / ``message_index`` to ``messageToStep``
    (``frontend/src/core/tasks/steps.ts``). After the run: ``fetchSubtaskSteps`` (``frontend/src/core/tasks/api.ts``)
    pages ``GET …/runs/{run}/events?event_types=subagent.step&task_id=…&limit=…[&after_seq=…]`` and
    ``eventsToSteps`` reads ``event_type``, ``content`` (the step) and ``metadata.task_id``."""
    thread_id, run_id, custom = await delegated_run(url)
    assert all(event["type"] for event in custom) and all("kind" in event for event in custom)
    by_type = [event["type"] for event in custom]
    assert by_type.index("task_started") < by_type.index("task_running") < by_type.index("task_completed")
    started = next(e for e in custom if e["type"] == "task_started")
    assert started["task_id"] == "t1" and started["description"] == "look around" and started["model_name"]
    steps = [e for e in custom if e["type"] == "task_running"]
    # The subagent's three steps: its turn asking for ls, the ls result, its answer; numbered from 1.
    assert [(e["task_id"], e["message_index"], e["message"]["type"]) for e in steps] == [
        ("t1", 1, "ai"),
        ("t1", 2, "tool"),
        ("t1", 3, "ai"),
    ]
    assert steps[0]["message"]["content"] == "let me look"
    assert [call["name"] for call in steps[0]["message"]["tool_calls"]] == ["ls"]
    assert steps[1]["message"]["name"] == "ls"
    assert steps[2]["message"]["content"] == "child report" and steps[2]["usage"] == CHILD_USAGE
    assert all(step["model_name"] == started["model_name"] for step in steps)
    completed = next(e for e in custom if e["type"] == "task_completed")
    assert completed["task_id"] == "t1" and completed["usage"] == CHILD_USAGE
    assert completed["result"] == "child report"

    base = f"/api/threads/{thread_id}/runs/{run_id}/events"
    async with as_user(url, "alice") as api:
        answered = await api.get(base, params={"event_types": "subagent.step", "task_id": "t1", "limit": "500"})
        assert answered.status_code == 200, answered.text
        served = answered.json()
        assert [event["event_type"] for event in served] == ["subagent.step"] * 3
        assert [event["metadata"]["task_id"] for event in served] == ["t1"] * 3
        assert [event["seq"] for event in served] == [event["seq"] for event in steps]
        assert [event["content"] for event in served] == [
            {
                "task_id": "t1",
                "message_index": 1,
                "kind": "ai",
                "text": "let me look",
                "truncated": False,
                "tool_calls": [{"name": "ls", "args": {"path": "/mnt/user-data/workspace"}}],
            },
            {
                "task_id": "t1",
                "message_index": 2,
                "kind": "tool",
                "text": served[1]["content"]["text"],
                "truncated": False,
                "tool_name": "ls",
            },
            {
                "task_id": "t1",
                "message_index": 3,
                "kind": "ai",
                "text": "child report",
                "truncated": False,
                "tool_calls": [],
            },
        ]
        assert all(event["thread_id"] == thread_id and event["run_id"] == run_id for event in served)

        # Paged as fetchSubtaskSteps pages: after the last seq of a full page.
        first = (await api.get(base, params={"event_types": "subagent.step", "task_id": "t1", "limit": "2"})).json()
        rest = (
            await api.get(
                base,
                params={"event_types": "subagent.step", "task_id": "t1", "limit": "2", "after_seq": first[-1]["seq"]},
            )
        ).json()
        assert first + rest == served
        assert (await api.get(base, params={"event_types": "subagent.step", "task_id": "t9"})).json() == []

        # Without a filter: every event of the run, DeerFlow's names where it has them.
        everything = (await api.get(base)).json()
        names = [event["event_type"] for event in everything]
        assert names[-1] == "run.end" and everything[-1]["content"]["status"] == "completed"
        assert names.count("subagent.start") == names.count("subagent.end") == 1
        assert names.count("model_call") == 2  # the lead's two turns (its task call is the subagent's events)
        end = everything[names.index("subagent.end")]
        assert end["content"] == {
            "task_id": "t1",
            "status": "completed",
            "model_name": started["model_name"],
            "usage": CHILD_USAGE,
            "result": "child report",
        }
        assert [event["seq"] for event in everything] == sorted(event["seq"] for event in everything)


async def test_run_events_refuse_bad_input_and_other_users(url: str) -> None:
    """The same request as ``fetchSubtaskSteps`` (``frontend/src/core/tasks/api.ts``), wrong: bob's view of alice's
    run, unknown runs and threads (404, the app then shows no steps), malformed paging (422)."""
    thread_id, run_id, _ = await delegated_run(url)
    base = f"/api/threads/{thread_id}/runs/{run_id}/events"
    async with as_user(url, "alice") as alice, as_user(url, "bob") as bob:
        assert (await bob.get(base)).status_code == 404
        assert (await bob.get(base, params={"event_types": "subagent.step", "task_id": "t1"})).status_code == 404
        unknown_run = f"/api/threads/{thread_id}/runs/00000000-0000-0000-0000-000000000000/events"
        assert (await alice.get(unknown_run)).status_code == 404
        assert (await alice.get(f"/api/threads/{thread_id}/runs/not-a-run/events")).status_code == 404
        assert (await alice.get(f"/api/threads/nobody-has-this/runs/{run_id}/events")).status_code == 404
        for params in ({"limit": "0"}, {"limit": "2001"}, {"limit": "many"}, {"after_seq": "-1"}):
            refused = await alice.get(base, params=params)
            assert refused.status_code == 422, params
            assert isinstance(refused.json()["detail"], str)
        assert (await alice.get(base, params={"event_types": ","})).status_code == 200


async def test_workspace_changes_answer_nothing_recorded_for_the_callers_runs_only(url: str) -> None:
    """``fetchWorkspaceChanges`` (``frontend/src/core/workspace-changes/api.ts``): the change badge asks after each
    run with ``include_files=true&include_diff=false`` and reads ``WorkspaceChangesResponse`` (``types.ts``).
    hartflow records no per-run file changes: ``available: false`` (DeerFlow's own answer for such a run), so the
    badge stays hidden — also for a run id that is no run of the thread (a branch's inherited turns are named by
    their source runs); bob's view of alice's thread, an unknown thread and a bad flag are refused."""
    thread_id, run_id, _ = await delegated_run(url)
    path = f"/api/threads/{thread_id}/runs/{run_id}/workspace-changes"
    async with as_user(url, "alice") as alice, as_user(url, "bob") as bob:
        answer = await alice.get(path, params={"include_files": "true", "include_diff": "false"})
        assert answer.status_code == 200
        assert answer.json() == {
            "available": False,
            "version": 1,
            "summary": {
                "created": 0,
                "modified": 0,
                "deleted": 0,
                "symlink_created": 0,
                "additions": 0,
                "deletions": 0,
                "truncated": False,
            },
            "files": [],
            "limits": {},
        }
        assert (await bob.get(path)).status_code == 404
        inherited = f"/api/threads/{thread_id}/runs/00000000-0000-0000-0000-000000000000/workspace-changes"
        assert (await alice.get(inherited)).json() == answer.json()
        assert (await alice.get(f"/api/threads/nobody-has-this/runs/{run_id}/workspace-changes")).status_code == 404
        assert (await alice.get(path, params={"include_files": "maybe"})).status_code == 422


async def test_token_usage_of_a_thread(url: str) -> None:
    """``fetchThreadTokenUsage`` (``frontend/src/core/threads/api.ts``) reads ``GET /api/threads/{id}/token-usage``
    (``ThreadTokenUsageResponse``, ``frontend/src/core/threads/types.ts``; ``threadTokenUsageToTokenUsage`` and
    ``selectContextUsage`` in ``frontend/src/core/threads/token-usage.ts``); another user's or an unknown thread
    is 404, which the app shows as no counter."""
    thread_id, _, _ = await delegated_run(url)
    async with as_user(url, "alice") as alice, as_user(url, "bob") as bob:
        answered = await alice.get(f"/api/threads/{thread_id}/token-usage")
        assert answered.status_code == 200, answered.text
        usage = answered.json()
        # Two lead answers, and the subagent's usage the TokenUsage middleware added to the dispatching one.
        total = 2 * LEAD_USAGE["total_tokens"] + CHILD_USAGE["total_tokens"]
        assert usage == {
            "thread_id": thread_id,
            "total_tokens": total,
            "total_input_tokens": 2 * LEAD_USAGE["input_tokens"] + CHILD_USAGE["input_tokens"],
            "total_output_tokens": 2 * LEAD_USAGE["output_tokens"] + CHILD_USAGE["output_tokens"],
            "total_runs": 1,
            "by_model": {},
            "by_caller": {"lead_agent": total - CHILD_USAGE["total_tokens"], "subagent": 10, "middleware": 0},
            "context_usage": {
                "token_count": LEAD_USAGE["input_tokens"],
                "max_context_tokens": None,
                "percentage": None,
            },
        }
        assert (await bob.get(f"/api/threads/{thread_id}/token-usage")).status_code == 404
        assert (await alice.get("/api/threads/nobody-has-this/token-usage")).status_code == 404
        assert (await alice.get("/api/threads/bad%20id/token-usage")).status_code == 422
        fresh = (await alice.post("/api/threads", json={})).json()["thread_id"]
        empty = (await alice.get(f"/api/threads/{fresh}/token-usage")).json()
        assert empty["total_tokens"] == 0 and empty["total_runs"] == 0 and empty["context_usage"] is None


async def test_the_shorthand_model_has_the_capabilities_the_config_gives(
    client: Client, home: Path, temporal_address: str
) -> None:
    """``loadModels`` (``frontend/src/core/models/api.ts``) reads ``models[].supports_thinking`` (the composer's
    Reasoning, Pro and Ultra modes: ``frontend/src/components/workspace/input-box.tsx``) and
    ``token_usage.enabled`` (the token counter) from ``GET /api/models``."""
    capable = make_config(
        home,
        temporal_address,
        model="openai:gpt-4o-mini",
        run={
            "model_capabilities": {"thinking": True, "reasoning_effort": True, "vision": True},
            "middlewares": {"token_usage": {"enabled": True}},
        },
    )
    plain = make_config(
        home, temporal_address, model="openai:gpt-4o-mini", run={"middlewares": {"token_usage": {"enabled": False}}}
    )
    async with serving_api(capable, client) as url, httpx.AsyncClient(base_url=url) as api:
        listed = (await api.get("/api/models")).json()
    (model,) = listed["models"]
    assert (model["supports_thinking"], model["supports_reasoning_effort"], model["supports_vision"]) == (
        True,
        True,
        True,
    )
    assert listed["token_usage"] == {"enabled": True}
    async with serving_api(plain, client) as url, httpx.AsyncClient(base_url=url) as api:
        listed = (await api.get("/api/models")).json()
    (model,) = listed["models"]
    assert (model["supports_thinking"], model["supports_reasoning_effort"], model["supports_vision"]) == (
        False,
        False,
        False,
    )
    assert listed["token_usage"] == {"enabled": False}


def test_model_capabilities_are_validated() -> None:
    with pytest.raises(ConfigError, match=r"model_capabilities\.thinking"):
        load_config(overrides={"run": {"model_capabilities": {"thinking": "sometimes"}}}, environ={})
    with pytest.raises(ConfigError, match=r"unknown key 'run\.model_capabilities\.reasoning'"):
        load_config(overrides={"run": {"model_capabilities": {"reasoning": True}}}, environ={})


async def test_a_paused_runs_events_come_from_the_open_run_and_each_run_is_its_own_segment(
    client: Client, home: Path, temporal_address: str
) -> None:
    """``GET …/runs/{run}/events`` (``frontend/src/core/tasks/api.ts``) on a run paused on a clarification: its
    chain is open, so the events come from the run itself, ending at the pause; once answered, the answer's run
    has its own events (from ``resumed`` to ``run.end``) and the first run's, now from the archive, are unchanged."""
    lead = write_script(home, [ask_clarification(options=["red", "blue"]), answer("blue it is")])
    config = make_config(home, temporal_address, model=lead, api=bearer_api())
    async with running_worker(client, config), serving_api(config, client) as url, as_user(url, "alice") as api:
        sdk = sdk_as(url, "alice")
        thread_id = (await sdk.threads.create())["thread_id"]
        first = await sdk.runs.create(
            thread_id, "lead_agent", input={"messages": [{"role": "user", "content": "pick"}]}
        )
        await sdk.runs.join(thread_id, first["run_id"])
        assert (await sdk.threads.get(thread_id))["status"] == "interrupted"
        paused = (await api.get(f"/api/threads/{thread_id}/runs/{first['run_id']}/events")).json()
        assert [event["event_type"] for event in paused][-1] == "awaiting_input"
        assert paused[-1]["content"]["question"] == "Which colour?"
        assert paused[-1]["category"] == "trace" and paused[-1]["metadata"] == {}

        second = await sdk.runs.create(thread_id, "lead_agent", command={"resume": "blue"})
        await sdk.runs.join(thread_id, second["run_id"])
        answered = (await api.get(f"/api/threads/{thread_id}/runs/{second['run_id']}/events")).json()
        again = (await api.get(f"/api/threads/{thread_id}/runs/{first['run_id']}/events")).json()
    assert again == paused
    names = [event["event_type"] for event in answered]
    assert names[0] == "resumed" and names[-1] == "run.end"
    assert answered[0]["seq"] > paused[-1]["seq"]
