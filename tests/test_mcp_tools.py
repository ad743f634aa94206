"""MCP servers as tools, end to end on a real Temporal dev server: the published ``mcp-server-time`` and
``mcp-server-git`` over stdio, and our own server (``tests/support/mcp_test_server.py``) over stdio and
streamable HTTP. A scripted model drives every run."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from temporalio.client import Client

from activities.thread_store import FilesystemThreadStore
from middlewares.deferred_tool_filter import DeferredToolFilterMiddleware, ToolSearchConfig, blocked_message
from tests.support import start_run
from tests.support.mcp_servers import SupervisedHttpServer, make_repository, our_server_stdio, supervised_http_server
from tests.support.mcp_test_server import tiny_png
from vocabulary.contracts import McpCallInput, ModelCallInput, ThreadRef
from vocabulary.state import ThreadState
from workers.config import HartflowConfig
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, unique, write_script
from workers.testing.history import history_events, scheduled_activities, scheduled_inputs
from workers.testing.mcp import git_server, time_server

SECRET = "s3cr3t-api-key-do-not-leak"


def _results(home: Path, config: HartflowConfig, thread: str) -> tuple[ThreadState, dict[str, ToolMessage]]:
    state = FilesystemThreadStore(home).load(ThreadRef(config.user_id, thread)).state
    return state, {m.tool_call_id: m for m in state.messages if isinstance(m, ToolMessage)}


def _deerflow_extensions_config(path: Path, servers: dict[str, Any]) -> Path:
    """An ``extensions_config.json`` as DeerFlow writes it: ``transport`` spelling, keys hartflow ignores
    (``oauth``, ``skills``, ``mcpInterceptors``) and a disabled server."""
    document = {
        "mcpServers": {
            **servers,
            "github": {
                "enabled": False,
                "type": "stdio",
                "command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-github"],
                "env": {"GITHUB_TOKEN": "$GITHUB_TOKEN"},
                "description": "GitHub MCP server for repository operations",
            },
        },
        "mcpInterceptors": [],
        "skills": {"pdf-processing": {"enabled": True}},
    }
    path.write_text(json.dumps(document, indent=2), encoding="utf-8")
    return path


async def test_time_and_git_tools_run_through_pooled_stdio_sessions(
    client: Client, home: Path, temporal_address: str, tmp_path: Path
) -> None:
    repository = make_repository(tmp_path / "repo")
    extensions = _deerflow_extensions_config(
        tmp_path / "extensions_config.json",
        {"time": {"enabled": True, "transport": "stdio", "description": "time", **time_server()}},
    )
    config = make_config(
        home,
        temporal_address,
        run={
            "middlewares": {
                "guardrails": {
                    "enabled": True,
                    "provider": {
                        "use": "deerflow.guardrails.builtin:AllowlistProvider",
                        "config": {"denied_tools": ["git_git_reset"]},
                    },
                }
            }
        },
        mcp={
            "config_file": str(extensions),
            "servers": {
                "git": git_server(repository),
                "ours": our_server_stdio(tmp_path / "marker"),
                "broken": {"command": str(tmp_path / "no-such-server")},
            },
        },
    )
    assert config.run.mcp_servers == ["time", "git", "ours", "broken"], "the disabled github server is left out"
    thread = unique("mcp")
    model = write_script(
        home,
        [
            calls(
                tool_call("time_get_current_time", "t1", timezone="Europe/Paris"),
                tool_call("git_git_log", "g1", repo_path=str(repository)),
                tool_call("ours_pid", "p1"),
            ),
            calls(tool_call("ours_pid", "p2"), tool_call("time_get_current_time", "t2", timezone="Nowhere/Atlantis")),
            calls(tool_call("ours_refuse", "r1"), tool_call("git_git_reset", "d1", repo_path=str(repository))),
            answer("done"),
        ],
    )
    async with running_worker(client, config):
        handle = await start_run(
            client, config, "what time is it, and what is in the repo?", model=model, thread_id=thread
        )
        view = await settle(handle)
        events = await history_events(handle)
        progress = await handle.query("events", result_type=list[dict[str, Any]])
    assert view.status == "completed" and view.final_message == "done"

    names = [name for name, _ in scheduled_activities(events)]
    assert names.count("mcp.list_tools") == 1, "discovery runs once per run"
    assert names.count("mcp.call_tool") == 6, "the guardrail's denial never reached the server"
    assert "tool.execute" not in names
    requests = await scheduled_inputs(client, events, "model.invoke", ModelCallInput)
    offered = {tool["function"]["name"] for tool in requests[0].tools}
    assert {"time_get_current_time", "time_convert_time", "git_git_log", "git_git_status", "ours_pid"} <= offered
    assert "bash" in offered and not any(name.startswith("broken_") for name in offered)

    _, results = _results(home, config, thread)
    assert json.loads(results["t1"].content)["timezone"] == "Europe/Paris"
    assert "the first commit" in results["g1"].content
    assert results["p1"].content == results["p2"].content, "one stdio process served both calls"
    assert results["t2"].status == "error"
    assert results["t2"].content.startswith("Error: Tool 'time_get_current_time' failed with McpToolError: ")
    assert "Invalid timezone" in results["t2"].content
    assert results["r1"].content == (
        "Error: Tool 'ours_refuse' failed with McpToolError: Error executing tool refuse: the vault is closed. "
        "Continue with available context, or choose an alternative tool."
    )
    assert results["r1"].additional_kwargs["deerflow_tool_meta"]["source"] == "exception"
    assert results["d1"].status == "error"
    assert results["d1"].content.startswith(
        "Guardrail denied: tool 'git_git_reset' was blocked (oap.tool_not_allowed)."
    )

    [unavailable] = [e for e in progress if e["kind"] == "mcp_server_unavailable"]
    assert unavailable["server"] == "broken"
    assert unavailable["error"].startswith("MCP server 'broken' cannot start: FileNotFoundError")


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[SupervisedHttpServer]:
    with supervised_http_server(tmp_path, SECRET) as server:
        yield server


async def test_http_transport_headers_from_the_environment_images_and_budget(
    client: Client,
    home: Path,
    temporal_address: str,
    http_server: SupervisedHttpServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("HARTFLOW_TEST_MCP_KEY", SECRET)
    caplog.set_level(logging.DEBUG)
    config = make_config(
        home,
        temporal_address,
        run={"model_capabilities": {"vision": True}},
        mcp={
            "servers": {
                "web": {"type": "http", "url": http_server.url, "headers": {"X-Api-Key": "$HARTFLOW_TEST_MCP_KEY"}}
            }
        },
    )
    thread = unique("mcp-http")
    model = write_script(
        home,
        [
            calls(tool_call("web_whoami", "w1"), tool_call("web_picture", "i1"), tool_call("web_report", "b1")),
            answer("seen"),
        ],
    )
    async with running_worker(client, config):
        handle = await start_run(client, config, "who am I?", model=model, thread_id=thread)
        view = await settle(handle)
        history = (await handle.fetch_history()).to_json()
        events = await history_events(handle)
    assert view.status == "completed"
    state, results = _results(home, config, thread)
    assert results["w1"].content == "authorized", "the header reached the server with the environment's value"

    [image] = state.viewed_images
    assert image.startswith("/mnt/user-data/outputs/.mcp-images/web_picture-") and image.endswith(".png")
    assert state.viewed_images[image]["mime_type"] == "image/png"
    assert (home / state.viewed_images[image]["actual_path"]).read_bytes().startswith(b"\x89PNG")
    assert results["i1"].content == (
        f"a red dot\n[image saved to {image} (image/png, {state.viewed_images[image]['size']} bytes)]\n"
        "[resource memo://dot]\ndrawn at 1x1"
    )
    assert results["b1"].content.startswith("[Full web_report output saved to /mnt/user-data/outputs/.tool-results/")
    requests = await scheduled_inputs(client, events, "model.invoke", ModelCallInput)
    [shown] = [m for m in requests[1].messages if str(m.id).startswith("view-image-context:")]
    urls = [block["image_url"]["url"] for block in shown.content if isinstance(block, dict) and "image_url" in block]
    assert urls == [f"data:image/png;base64,{base64.b64encode(tiny_png()).decode()}"], "ViewImage showed the image"
    assert not any(str(m.id).startswith("view-image-context:") for m in state.messages), "and took it away again"

    assert SECRET not in history
    assert SECRET not in caplog.text
    stored = [p.read_bytes() for p in home.rglob("*") if p.is_file()]
    assert not any(SECRET.encode() in data for data in stored)


async def test_a_server_that_crashes_mid_call_is_retried_on_a_new_session(
    client: Client, home: Path, temporal_address: str, http_server: SupervisedHttpServer
) -> None:
    config = make_config(
        home,
        temporal_address,
        run={"tool_call": {"heartbeat_seconds": 5, "max_attempts": 6}},
        mcp={"servers": {"web": {"type": "http", "url": http_server.url}}},
    )
    thread = unique("mcp-crash")
    model = write_script(home, [calls(tool_call("web_crash_once", "c1")), answer("recovered")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "crash please", model=model, thread_id=thread)
        view = await settle(handle)
        events = await history_events(handle)
    assert view.status == "completed"
    _, results = _results(home, config, thread)
    assert results["c1"].status == "success" and results["c1"].content == "answered after a restart"
    assert http_server.marker.exists() and http_server.starts >= 2, "the first attempt killed the server"
    [scheduled] = [
        e.event_id
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "mcp.call_tool"
    ]
    [started] = [
        e.activity_task_started_event_attributes
        for e in events
        if e.HasField("activity_task_started_event_attributes")
        and e.activity_task_started_event_attributes.scheduled_event_id == scheduled
    ]
    assert started.attempt >= 2, "the call was retried"


async def test_a_server_that_never_answers_times_out_into_an_error_result(
    client: Client, home: Path, temporal_address: str, http_server: SupervisedHttpServer
) -> None:
    config = make_config(
        home,
        temporal_address,
        run={"tool_call": {"heartbeat_seconds": 5, "timeout_seconds": 3, "max_attempts": 1}},
        mcp={"servers": {"web": {"type": "http", "url": http_server.url}}},
    )
    thread = unique("mcp-hang")
    model = write_script(home, [calls(tool_call("web_hang", "h1")), calls(tool_call("web_whoami", "w1")), answer("ok")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "wait forever", model=model, thread_id=thread)
        view = await settle(handle)
    assert view.status == "completed" and view.final_message == "ok", "the run went on after the timeout"
    _, results = _results(home, config, thread)
    assert results["h1"].status == "error"
    assert results["h1"].content.startswith("Error: Tool 'web_hang' failed with ")
    assert results["w1"].content == "unauthorized", "the same server still answers after the abandoned call"


async def test_sse_transport_and_a_stdio_server_that_dies_mid_call(
    client: Client, home: Path, temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARTFLOW_TEST_MCP_KEY", SECRET)
    (tmp_path / "sse").mkdir()
    with supervised_http_server(tmp_path / "sse", SECRET, sse=True) as sse:
        config = make_config(
            home,
            temporal_address,
            run={"tool_call": {"heartbeat_seconds": 5, "max_attempts": 3}},
            mcp={
                "servers": {
                    "legacy": {"type": "sse", "url": sse.url, "headers": {"X-Api-Key": "$HARTFLOW_TEST_MCP_KEY"}},
                    "local": our_server_stdio(tmp_path / "stdio-crashed"),
                }
            },
        )
        thread = unique("mcp-sse")
        model = write_script(
            home,
            [
                calls(tool_call("legacy_whoami", "w1"), tool_call("local_pid", "p1")),
                calls(tool_call("local_crash_once", "c1")),
                calls(tool_call("local_pid", "p2")),
                answer("fine"),
            ],
        )
        async with running_worker(client, config):
            handle = await start_run(client, config, "who and where?", model=model, thread_id=thread)
            view = await settle(handle)
            history = (await handle.fetch_history()).to_json()
    assert view.status == "completed"
    _, results = _results(home, config, thread)
    assert results["w1"].content == "authorized"
    assert results["c1"].content == "answered after a restart", "the retry started the stdio server again"
    assert results["p1"].content != results["p2"].content, "a new process serves the calls after the crash"
    assert SECRET not in history


async def test_tool_search_defers_mcp_tools_and_mcp_routing_promotes_the_best_match(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(
        home,
        temporal_address,
        run={"middlewares": {"tool_search": {"enabled": True, "auto_promote_top_k": 1}}},
        mcp={"servers": {"time": time_server()}},
    )
    thread = unique("mcp-search")
    model = write_script(
        home,
        [
            calls(
                tool_call("time_convert_time", "x0", source_timezone="UTC", time="12:00", target_timezone="Asia/Tokyo")
            ),
            calls(tool_call("tool_search", "s1", query="select:time_convert_time")),
            calls(
                tool_call("time_convert_time", "x1", source_timezone="UTC", time="12:00", target_timezone="Asia/Tokyo")
            ),
            answer("converted"),
        ],
    )
    async with running_worker(client, config):
        handle = await start_run(client, config, "What is the current time?", model=model, thread_id=thread)
        view = await settle(handle)
        events = await history_events(handle)
        chain = await handle.query("chain", result_type=list[str])
    assert view.status == "completed"
    assert chain.index("McpRouting") + 1 == chain.index("DeferredToolFilter")

    requests = await scheduled_inputs(client, events, "model.invoke", ModelCallInput)
    offered = [[tool["function"]["name"] for tool in request.tools] for request in requests]
    assert all("time_get_current_time" in names for names in offered), "McpRouting promoted the best match"
    assert ["time_convert_time" in names for names in offered] == [False, False, True, True]
    # SystemMessageCoalescing puts DynamicContext's date reminder after the block, as in DeerFlow.
    assert requests[0].system_message is not None
    assert (
        str(requests[0].system_message.content)
        .rpartition("\n\n<system-reminder>")[0]
        .endswith("<available-deferred-tools>\ntime_convert_time\ntime_get_current_time\n</available-deferred-tools>")
    )
    executed = await scheduled_inputs(client, events, "mcp.call_tool", McpCallInput)
    assert [call.tool for call in executed] == ["convert_time"], "the blocked call never reached the server"

    state, results = _results(home, config, thread)
    assert results["x0"].content == blocked_message("time_convert_time")
    assert json.loads(results["x1"].content)["target"]["timezone"] == "Asia/Tokyo"
    filter_hash = DeferredToolFilterMiddleware(ToolSearchConfig(enabled=True)).catalog.hash
    assert state.promoted is not None and state.promoted["catalog_hash"] != filter_hash
    assert sorted(state.promoted["names"]) == ["time_convert_time", "time_get_current_time"]


async def test_runs_without_mcp_servers_never_discover(client: Client, home: Path, temporal_address: str) -> None:
    config = make_config(home, temporal_address)
    assert config.run.mcp_servers == []
    model = write_script(home, [answer("plain")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "hi", model=model)
        await settle(handle)
        events = await history_events(handle)
    assert not any(name.startswith("mcp.") for name, _ in scheduled_activities(events))


async def test_a_continued_run_keeps_the_tools_it_discovered(client: Client, home: Path, temporal_address: str) -> None:
    config = make_config(home, temporal_address, mcp={"servers": {"time": time_server()}})
    thread = unique("mcp-long")
    # Distinct zones: LoopDetection stops a run that repeats the same call.
    zones = ["UTC", *(f"Etc/GMT+{h}" for h in range(1, 13)), *(f"Etc/GMT-{h}" for h in range(1, 13))]
    turns = [calls(tool_call("time_get_current_time", f"t{n}", timezone=zone)) for n, zone in enumerate(zones)]
    model = write_script(home, [*turns, answer("long day")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "what time is it, again and again?", model=model, thread_id=thread)
        view = await handle.result()  # follows the continue-as-new chain to the last run
        runs = [run async for run in client.list_workflows(f"WorkflowId = '{handle.id}'")]
        histories = [await history_events(client.get_workflow_handle(handle.id, run_id=run.run_id)) for run in runs]
    assert view.status == "completed" and view.final_message == "long day"
    assert len(runs) >= 2, "the run continued as new (the dev server suggests it after 150 events)"
    discoveries = [[name for name, _ in scheduled_activities(events)].count("mcp.list_tools") for events in histories]
    assert sorted(discoveries) == [0] * (len(runs) - 1) + [1], "only the first run asked the server"
    _, results = _results(home, config, thread)
    assert all(results[f"t{n}"].status == "success" for n in range(25))


async def test_the_mcp_bench_measures_calls_and_discovery(temporal_address: str, tmp_path: Path) -> None:
    from bench.mcp_calls import measure

    table = await measure(temporal_address, tmp_path, turns=2, runs=2, direct=3)
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert [row.split("|")[1].strip() for row in rows] == [
        "MCP tool call (`mcp-server-time`, stdio)",
        "direct: `mcp` client, one session, in a loop",
        "hartflow: `mcp.call_tool` activity, pooled session",
        "discovery per run (`mcp.list_tools`)",
        "1 server",
        "5 servers",
    ]
    assert rows[2].split("|")[2].strip() == "4", "two runs of two calls each"
