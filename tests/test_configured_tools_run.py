"""Configured tools in real runs, on a real Temporal dev server with ``hartflow worker`` processes: one scripted
turn calls ``web_search`` (a SearXNG-compatible endpoint), ``web_fetch``, a LangChain tool from a PyPI package
(``langchain-community``'s ``ListDirectoryTool``), a ``durable_tool`` function and an activity a team's worker
serves on its own task queue (``activity_as_tool``) — each an activity of the run. The worker is SIGKILLed while
the function is mid-call; another worker finishes the run, and no call that had completed runs again. Then each
kind alone, with the worker SIGKILLed while that call is in flight (held by the test: a held HTTP request, a FIFO
the LangChain tool blocks on, the function's hanging first attempt, a team activity waiting for its release)."""

from __future__ import annotations

import asyncio
import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

from activities.thread_store import FilesystemThreadStore
from tests.support import own_tools, start_run
from tests.support.own_tools import LOG_VARIABLE, crm_lookup
from tests.support.web_server import LocalWeb
from vocabulary.contracts import ModelCallInput, ThreadRef
from workers.testing import answer, calls, make_config, running_worker, tool_call, unique, write_script
from workers.testing.history import history_events, scheduled_activities, scheduled_inputs
from workers.testing.processes import POLL_SECONDS, kill_hard, wait_for_file, worker_process
from workers.tools_list import list_tools


def _tools(web: str, crm_queue: str, listed: Path) -> dict[str, object]:
    return {
        "tool_groups": [{"name": "web"}, {"name": "mine"}, {"name": "file:read"}],
        "tools": [
            {
                "name": "web_search",
                "group": "web",
                "use": "deerflow.community.searxng.tools:web_search_tool",
                "base_url": web,
            },
            {
                "name": "web_fetch",
                "group": "web",
                "use": "deerflow.community.jina_ai.tools:web_fetch_tool",
                "allow_private_addresses": True,
            },
            {
                "name": "list_directory",
                "group": "file:read",
                "use": "langchain_community.tools.file_management:ListDirectoryTool",
                "root_dir": str(listed),
            },
            {"name": "slow_note", "group": "mine", "use": "tests.support.own_tools:slow_note"},
            {
                "name": "crm",
                "group": "mine",
                "use": "activities.configured_tools:activity_as_tool",
                "activity": "crm_lookup",
                "task_queue": crm_queue,
                "description": "Look a customer up in the CRM.",
                "parameters": {
                    "type": "object",
                    "properties": {"customer_id": {"type": "string"}, "fields": {"type": "array"}},
                    "required": ["customer_id", "fields"],
                },
                "max_attempts": 2,
            },
            {"name": "ls", "group": "file:read", "use": "deerflow.sandbox.tools:ls_tool"},
        ],
    }


async def test_every_kind_of_configured_tool_runs_as_an_activity_and_survives_a_killed_worker(
    client: Client, home: Path, temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "slow_note.log"
    monkeypatch.setenv(LOG_VARIABLE, str(log))  # the worker processes inherit it
    listed = tmp_path / "listed"
    listed.mkdir()
    (listed / "report.md").write_text("# report\n")
    crm_queue = unique("crm")
    with LocalWeb().running() as web:
        config = make_config(home, temporal_address, **_tools(web.url, crm_queue, listed))
        listing = await list_tools(config)
        sources = {tool["name"]: tool["source"] for tool in listing.tools}
        assert sources["web_search"] == "web:searxng" and sources["ls"] == "built-in"
        assert sources["list_directory"] == "langchain:langchain_community.tools.file_management:ListDirectoryTool"
        assert sources["slow_note"] == "function:tests.support.own_tools:slow_note"
        assert sources["crm"] == f"activity:crm_lookup@{crm_queue}"
        assert "bash" not in sources, "a tools: list without bash offers no bash"

        thread = unique("tools")
        model = write_script(
            home,
            [
                calls(
                    tool_call("web_search", "s1", query="durable agents"),
                    tool_call("web_fetch", "f1", url=f"{web.url}/article"),
                    tool_call("list_directory", "l1"),
                    tool_call("crm", "c1", customer_id="c-42", fields=["name"]),
                    tool_call("slow_note", "n1", text="ab", repeat=2),
                ),
                answer("all done"),
            ],
        )
        team = Worker(client, task_queue=crm_queue, activities=[crm_lookup])
        async with team:
            with worker_process(config, tmp_path / "worker.yaml") as doomed:
                handle = await start_run(client, config, "use every tool", model=model, thread_id=thread)
                await wait_for_file(log)
                kill_hard(doomed)
            with worker_process(config, tmp_path / "worker2.yaml"):
                final = await asyncio.wait_for(handle.result(), timeout=180)
        events = await history_events(handle)

    assert final.status == "completed" and final.final_message == "all done"
    assert log.read_text().split() == ["start", "start", "end"], "the killed call was retried once, to its end"
    names = [name for name, _ in scheduled_activities(events)]
    assert names.count("tools.describe") == 1
    assert names.count("tools.call") == 4, "web_search, web_fetch, list_directory, slow_note (its retry is an attempt)"
    assert names.count("crm_lookup") == 1
    summaries = [summary for _, summary in scheduled_activities(events)]
    assert "tool slow_note" in summaries and "tool crm" in summaries

    state = FilesystemThreadStore(home).load(ThreadRef(config.user_id, thread)).state
    results = {m.tool_call_id: m for m in state.messages if isinstance(m, ToolMessage)}
    assert json.loads(str(results["s1"].content))[0]["url"] == f"{web.url}/article"
    assert str(results["f1"].content).startswith("# Durable Agents\n\n")
    assert str(results["l1"].content) == "report.md"
    assert json.loads(str(results["c1"].content)) == {"customer": "c-42", "fields": {"name": "name of c-42"}}
    assert json.loads(str(results["n1"].content)) == {"noted": "abab"}
    assert all(m.status == "success" for m in results.values())


# -- a worker SIGKILLed in the middle of each kind of call ------------------------------------------------------

CUSTOMER = {"customer": "c-7", "fields": {"name": "name of c-7"}}


def _held_tools(web: str, crm_queue: str, shared: Path) -> dict[str, object]:
    """One entry per kind, each noticed within two seconds when its worker dies (``heartbeat_seconds``)."""
    quick = {"group": "mine", "heartbeat_seconds": 2, "max_attempts": 3}
    return {
        "tool_groups": [{"name": "mine"}],
        "tools": [
            {"name": "web_search", "use": "deerflow.community.searxng.tools:web_search_tool", "base_url": web, **quick},
            {
                "name": "web_fetch",
                "use": "deerflow.community.jina_ai.tools:web_fetch_tool",
                "allow_private_addresses": True,
                **quick,
            },
            {
                "name": "read_text",
                "use": "langchain_community.tools.file_management:ReadFileTool",
                "root_dir": str(shared),
                **quick,
            },
            {"name": "slow_note", "group": "mine", "use": "tests.support.own_tools:slow_note"},
            {
                "name": "crm",
                "group": "mine",
                "use": "activities.configured_tools:activity_as_tool",
                "activity": "held_crm_lookup",
                "task_queue": crm_queue,
                "description": "Look a customer up in the CRM.",
                "parameters": {"type": "object", "properties": {"customer_id": {"type": "string"}, "fields": {}}},
            },
        ],
    }


class _Pipe:
    """A FIFO the LangChain ``ReadFileTool`` reads: its ``open`` blocks until a writer comes, so the call stays in
    flight for as long as the test wants."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self._writer: int | None = None

    async def wait_for_reader(self, timeout: float = 120) -> None:
        """Wait until a call has the pipe open, and keep it waiting in ``read`` (a writer that writes nothing)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self._writer is None:
            try:
                self._writer = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO while no reader has it open
            except OSError as exc:
                if exc.errno != errno.ENXIO or asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(POLL_SECONDS)

    def close(self, text: str = "") -> None:
        """Give the reader ``text`` and the end of the file (nothing to close when no reader came)."""
        if self._writer is not None:
            if text:
                os.write(self._writer, text.encode())
            os.close(self._writer)
            self._writer = None


@pytest.mark.parametrize("kind", ["web_search", "web_fetch", "langchain", "function", "other_queue"])
async def test_each_kind_of_configured_tool_survives_a_worker_killed_mid_call(
    client: Client, home: Path, temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    log = tmp_path / "slow_note.log"
    monkeypatch.setenv(LOG_VARIABLE, str(log))
    held = own_tools.HeldLookups()
    monkeypatch.setattr(own_tools, "HELD", held)
    shared = tmp_path / "shared"
    shared.mkdir()
    pipe = _Pipe(shared / "pipe.txt")
    crm_queue = unique("crm")
    with LocalWeb().running() as web:
        config = make_config(home, temporal_address, **_held_tools(web.url, crm_queue, shared))
        call = {
            "web_search": tool_call("web_search", "k1", query="durable agents"),
            "web_fetch": tool_call("web_fetch", "k1", url=f"{web.url}/article"),
            "langchain": tool_call("read_text", "k1", file_path="pipe.txt"),
            "function": tool_call("slow_note", "k1", text="ab", repeat=2),
            "other_queue": tool_call("crm", "k1", customer_id="c-7", fields=["name"]),
        }[kind]
        gate = web.hold({"web_search": "/search", "web_fetch": "/article"}.get(kind, "/unused"))
        model = write_script(home, [calls(call), answer("survived")])
        async with Worker(client, task_queue=crm_queue, activities=[own_tools.held_crm_lookup]):
            with worker_process(config, tmp_path / "worker.yaml") as doomed:
                handle = await start_run(client, config, f"call {kind}", model=model)
                if kind in ("web_search", "web_fetch"):
                    await asyncio.to_thread(gate.arrived.wait, 60)
                elif kind == "langchain":
                    await pipe.wait_for_reader()
                elif kind == "function":
                    await wait_for_file(log)
                else:
                    await asyncio.to_thread(held.arrived.wait, 60)
                kill_hard(doomed)  # the call is in flight: its result is not in the history
            pipe.close()  # its reader died with the worker
            gate.released.set()
            held.released.set()
            with worker_process(config, tmp_path / "worker2.yaml"):
                if kind == "langchain":
                    await pipe.wait_for_reader()  # the retry
                    pipe.close("piped words")
                final = await asyncio.wait_for(handle.result(), timeout=180)
        events = await history_events(handle)

    assert final.status == "completed" and final.final_message == "survived"
    state = FilesystemThreadStore(home).load(ThreadRef(config.user_id, final.thread_id)).state
    result = next(m for m in state.messages if isinstance(m, ToolMessage) and m.tool_call_id == "k1")
    assert result.status == "success"
    names = [name for name, _ in scheduled_activities(events)]
    if kind == "other_queue":
        assert held.calls == 1, "the team's activity ran on: the run's worker dying does not call it again"
        assert names.count("held_crm_lookup") == 1 and json.loads(str(result.content)) == CUSTOMER
        return
    assert names.count("tools.call") == 1
    assert _attempts(events, "tools.call") == [2], "the killed attempt, then the retry on the new worker"
    if kind in ("web_search", "web_fetch"):
        path = {"web_search": "/search", "web_fetch": "/article"}[kind]
        assert len([r for r in web.requests if r.startswith(path)]) == 2
    if kind == "function":
        assert log.read_text().split() == ["start", "start", "end"]
    content = str(result.content)
    assert {
        "web_search": lambda: json.loads(content)[0]["url"] == f"{web.url}/article",
        "web_fetch": lambda: content.startswith("# Durable Agents\n\n"),
        "langchain": lambda: content == "piped words",
        "function": lambda: json.loads(content) == {"noted": "abab"},
    }[kind]()


def _attempts(events: list[Any], activity_type: str) -> list[int]:
    """The attempt that completed, for each completed ``activity_type`` activity of the history."""
    scheduled = {
        e.event_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity_type
    }
    started = {
        e.event_id: e.activity_task_started_event_attributes.attempt
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id in scheduled
    }
    return [
        started[e.activity_task_completed_event_attributes.started_event_id]
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
        and e.activity_task_completed_event_attributes.started_event_id in started
    ]


# -- subagents ------------------------------------------------------------------------------------------------


async def test_subagents_get_the_configured_tools_their_type_allows(
    client: Client, home: Path, temporal_address: str
) -> None:
    """DeerFlow's general-purpose subagent inherits every tool of the lead (``tools=None``), its bash agent only
    the sandbox tools it lists: so here, the lead's configured ``web_search`` goes to the first, not the second."""
    with LocalWeb().running() as web:
        # Both children follow this script: each tries web_search first.
        child_model = write_script(home, [calls(tool_call("web_search", "s1", query="durable agents")), answer("ok")])
        tools = {
            "tool_groups": [{"name": "web"}],
            "tools": [
                {
                    "name": "web_search",
                    "group": "web",
                    "use": "deerflow.community.searxng.tools:web_search_tool",
                    "base_url": web.url,
                },
                {"name": "bash", "group": "web", "use": "deerflow.sandbox.tools:bash_tool"},
                {"name": "ls", "group": "web", "use": "deerflow.sandbox.tools:ls_tool"},
            ],
        }
        run = {"subagent_enabled": True, "subagents": {"model": child_model, "max_concurrent": 1}}
        config = make_config(home, temporal_address, run=run, **tools)
        lead = [
            calls(
                tool_call("task", "t1", description="search", prompt="search the web", subagent_type="general-purpose")
            ),
            calls(tool_call("task", "t2", description="shell", prompt="list files", subagent_type="bash")),
            answer("delegated"),
        ]
        async with running_worker(client, config):
            handle = await start_run(client, config, "delegate", model=write_script(home, lead))
            view = await handle.result()
            events = await history_events(handle)
            children = [
                e.start_child_workflow_execution_initiated_event_attributes.workflow_id
                for e in events
                if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
            ]
            offered, ran = [], []
            for child in children:
                child_events = await history_events(client.get_workflow_handle(child))
                inputs = await scheduled_inputs(client, child_events, "model.invoke", ModelCallInput)
                offered.append(sorted(t["function"]["name"] for t in inputs[0].tools))
                ran.append([name for name, _ in scheduled_activities(child_events)])

    assert view.status == "completed" and view.final_message == "delegated"
    assert "web_search" in offered[0] and {"bash", "ls"} <= set(offered[0])
    assert offered[1] == ["bash", "ls"], "the bash agent: the lead's sandbox tools it lists, no configured tools"
    assert ran[0].count("tools.call") == 1, "the general-purpose subagent searched"
    assert "tools.call" not in ran[1], "the bash agent's web_search was answered as an unknown tool"
    assert len([r for r in web.requests if r.startswith("/search")]) == 1
