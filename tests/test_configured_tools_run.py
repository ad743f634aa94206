"""Configured tools in real runs, on a real Temporal dev server with ``hartflow worker`` processes: one scripted
turn calls ``web_search`` (a SearXNG-compatible endpoint), ``web_fetch``, a LangChain tool from a PyPI package
(``langchain-community``'s ``ListDirectoryTool``), a ``durable_tool`` function and an activity a team's worker
serves on its own task queue (``activity_as_tool``) — each an activity of the run. The worker is SIGKILLed while
the function is mid-call; another worker finishes the run, and no call that had completed runs again."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from langchain_core.messages import ToolMessage
from temporalio.client import Client
from temporalio.worker import Worker

from activities.thread_store import FilesystemThreadStore
from tests.support import start_run
from tests.support.own_tools import LOG_VARIABLE, crm_lookup
from tests.support.web_server import LocalWeb
from vocabulary.contracts import ThreadRef
from workers.testing import answer, calls, make_config, tool_call, unique, write_script
from workers.testing.history import history_events, scheduled_activities
from workers.testing.processes import kill_hard, wait_for_file, worker_process
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
