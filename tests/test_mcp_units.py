"""MCP pieces without a Temporal server: McpRouting's matching, the settings (hartflow.yaml and DeerFlow's
extensions_config.json), ``$NAME`` resolution and redaction, result rendering, and the chain's shape."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import mcp_types as types
import pytest
from langchain_core.messages import HumanMessage

from activities.mcp.content import IMAGES_DIR, render
from activities.mcp.settings import McpConfigError, McpServerSettings, read_extensions_config, redact, resolve
from activities.thread_files import ThreadFiles
from middlewares._mcp_routing import best_matches, build_index, clamp_top_k, words
from middlewares.chain import build_lead_chain, describe
from middlewares.deferred_tool_filter import DeferredToolFilterMiddleware
from middlewares.mcp_routing import McpRoutingMiddleware
from middlewares.run_settings import RunSettings
from tests.support import StubRunContext
from tests.support.mcp_test_server import tiny_png
from vocabulary.contracts import McpListToolsResult, McpServerTools, McpToolInfo, ThreadRef
from vocabulary.state import ThreadState
from vocabulary.tools import ToolSpec
from workers.config import ConfigError, load_config
from workers.testing.mcp import time_server
from workflows.run.mcp_tools import tool_spec, usable_tools

TIME = build_index(
    [
        ("time_get_current_time", "Get current time in a specific timezone"),
        ("time_convert_time", "Convert time between timezones"),
        ("git_git_log", "Shows the commit logs"),
    ]
)


# -- routing ---------------------------------------------------------------------------------------------


def test_words_are_lower_case_singular_and_skip_common_ones() -> None:
    assert words("Show me the Commits, please!") == {"commit"}
    assert words("class glass") == {"class", "glass"}, "a double s is not a plural"


@pytest.mark.parametrize(
    ("message", "top_k", "expected"),
    [
        ("What is the current time?", 1, ["time_get_current_time"]),
        ("What is the current time?", 3, ["time_get_current_time", "time_convert_time"]),
        ("convert 9am Paris time to Tokyo", 3, ["time_convert_time", "time_get_current_time"]),
        ("show the git commit log", 5, ["git_git_log"]),
        ("hello there", 3, []),
        ("", 3, []),
    ],
)
def test_best_matches(message: str, top_k: int, expected: list[str]) -> None:
    assert best_matches(TIME, message, top_k) == expected


def test_ties_go_to_the_name_and_top_k_is_clamped() -> None:
    index = build_index([(f"srv_tool{n}", "weather forecast") for n in (3, 1, 2, 5, 4, 6)])
    assert best_matches(index, "weather", 99) == ["srv_tool1", "srv_tool2", "srv_tool3", "srv_tool4", "srv_tool5"]
    assert best_matches(index, "weather", 0) == ["srv_tool1"]
    assert [clamp_top_k(k) for k in (-1, 0, 1, 3, 5, 6)] == [1, 1, 1, 3, 5, 5]


async def test_mcp_routing_promotes_once_under_the_filter_hash() -> None:
    tools = [ToolSpec("time_get_current_time", "Get current time", {"type": "object"}, server="time")]
    routing = McpRoutingMiddleware(tools, "hash-1", 3)
    ctx = StubRunContext()
    hidden = HumanMessage("current time?", additional_kwargs={"hide_from_ui": True})
    assert await routing.before_model(ThreadState(messages=[HumanMessage("hi"), hidden]), ctx) is None
    state = ThreadState(messages=[HumanMessage("what is the current time?")])
    update = await routing.before_model(state, ctx)
    assert update == {"promoted": {"catalog_hash": "hash-1", "names": ["time_get_current_time"]}}
    promoted = ThreadState(messages=state.messages, promoted=update["promoted"])
    assert await routing.before_model(promoted, ctx) is None, "nothing new to promote"


def test_mcp_routing_sits_right_before_the_filter_only_with_tool_search() -> None:
    mcp = [ToolSpec("time_get_current_time", "Get current time", {"type": "object"}, server="time")]
    off = describe(build_lead_chain(RunSettings(), mcp_tools=mcp))
    assert "McpRouting" not in off and "DeferredToolFilter" not in off
    settings = RunSettings.model_validate({"middlewares": {"tool_search": {"enabled": True}}})
    assert "DeferredToolFilter" not in describe(build_lead_chain(settings)), "nothing to defer"
    chain = build_lead_chain(settings, mcp_tools=mcp)
    names = describe(chain)
    assert names.index("McpRouting") + 1 == names.index("DeferredToolFilter")
    deferred = next(mw for mw in chain if isinstance(mw, DeferredToolFilterMiddleware))
    assert deferred.catalog.names == {"time_get_current_time"}


def test_discovered_tools_keep_the_first_of_two_names() -> None:
    def info(server: str, name: str) -> McpToolInfo:
        return McpToolInfo(server, name, name.split("_", 1)[1], "", {"type": "object", "properties": {}})

    result = McpListToolsResult(
        [McpServerTools("a", [info("a", "a_x"), info("a", "bash_y")]), McpServerTools("b", error="down")]
    )
    tools, notes = usable_tools(result, {"bash_y"})
    assert [tool.name for tool in tools] == ["a_x"]
    assert notes == ["MCP tool 'bash_y' of server 'a' is skipped: the name is taken"]
    assert tool_spec(info("a", "a_x")).server == "a"
    odd = McpToolInfo("a", "a_z", "z", "", {"type": "string"})
    assert tool_spec(odd).parameters == {"type": "object", "properties": {}}


# -- settings --------------------------------------------------------------------------------------------


def test_hartflow_yaml_validates_mcp_servers(tmp_path: Path) -> None:
    path = tmp_path / "hartflow.yaml"
    for body, problem in [
        ("mcp: {servers: {x: {type: http}}}", "an http server needs 'url'"),
        ("mcp: {servers: {x: {}}}", "a stdio server needs 'command'"),
        ("mcp: {servers: {x: {command: a, token: b}}}", "unknown key 'mcp.servers.x.token'"),
        ("mcp: {servers: {'a b': {command: a}}}", "must be 1-40 letters"),
        ("run: {mcp_servers: [x]}", "run.mcp_servers is not a setting"),
        (f"mcp: {{config_file: {tmp_path / 'missing.json'}}}", "mcp.config_file not found"),
    ]:
        path.write_text(body, encoding="utf-8")
        with pytest.raises(ConfigError, match=problem):
            load_config(path, environ={})
    path.write_text("mcp: {servers: {a: {command: x}, b: {command: y, enabled: false}}}", encoding="utf-8")
    assert load_config(path, environ={}).run.mcp_servers == ["a"]


def test_deerflow_extensions_config_is_read_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "extensions_config.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "filesystem": {
                        "enabled": True,
                        "type": "stdio",
                        "command": "npx",
                        "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                        "env": {},
                        "description": "files",
                    },
                    "search": {
                        "enabled": True,
                        "transport": "sse",
                        "url": "https://example.com/sse",
                        "headers": {"Authorization": "$SEARCH_TOKEN"},
                        "oauth": {"enabled": False},
                        "tool_name_prefix": False,
                    },
                },
                "skills": {"pdf": {"enabled": True}},
            }
        ),
        encoding="utf-8",
    )
    servers = read_extensions_config(path)
    assert servers["filesystem"].command == "npx" and servers["filesystem"].type == "stdio"
    assert servers["search"].type == "sse" and servers["search"].headers == {"Authorization": "$SEARCH_TOKEN"}
    assert servers["search"].tool_name_prefix is False
    path.write_text(json.dumps({"mcpServers": {"x": {"type": "http"}}}), encoding="utf-8")
    with pytest.raises(McpConfigError, match=r"server 'x': entry: Value error, an http server needs 'url'"):
        read_extensions_config(path)


def test_environment_references_are_read_late_and_redacted() -> None:
    settings = McpServerSettings(type="http", url="http://x", headers={"A": "$TOKEN", "B": "literal"})
    resolved = resolve("web", settings, {"TOKEN": "hunter2"})
    assert resolved.headers == {"A": "hunter2", "B": "literal"}
    assert settings.headers["A"] == "$TOKEN", "the settings keep the reference"
    assert redact("auth hunter2 failed", resolved.secrets) == "auth *** failed"
    with pytest.raises(McpConfigError) as missing:
        resolve("web", settings, {})
    assert str(missing.value) == "MCP server 'web': headers.A refers to $TOKEN, which is not set"


# -- results ---------------------------------------------------------------------------------------------


def test_results_render_text_images_and_resources(tmp_path: Path) -> None:
    files = ThreadFiles.on_disk(tmp_path)
    thread = ThreadRef("default", "t-1")
    png = base64.b64encode(tiny_png()).decode()
    result = types.CallToolResult(
        content=[
            types.TextContent(text="first"),
            types.ImageContent(data=png, mime_type="image/png"),
            types.ImageContent(data=base64.b64encode(b"not an image").decode(), mime_type="image/gif"),
            types.EmbeddedResource(resource=types.BlobResourceContents(uri="file:///a.bin", blob="AAAA")),
            types.ResourceLink(uri="https://example.com/doc", name="doc"),
        ]
    )
    rendered = render(result, tool_name="srv/pic", thread=thread, files=files)
    [path] = rendered.viewed_images
    assert path.startswith(f"{IMAGES_DIR}/srv_pic-") and path.endswith(".png")
    assert files.read(thread, path) == tiny_png()
    assert rendered.text.splitlines() == [
        "first",
        f"[image saved to {path} (image/png, {len(tiny_png())} bytes)]",
        "[image (image/gif, 12 bytes) not stored: unsupported or too large]",
        "[binary resource file:///a.bin (unknown type, ~3 bytes)]",
        "[resource link https://example.com/doc: doc]",
    ]
    structured = types.CallToolResult(content=[], structured_content={"answer": 42})
    assert render(structured, tool_name="x", thread=thread, files=None).text == '{"answer": 42}'


# -- hartflow tools list ---------------------------------------------------------------------------------


def test_tools_list_shows_built_in_and_mcp_tools_with_server_and_deferral(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from workers.cli import run_command

    path = tmp_path / "hartflow.yaml"
    config = {
        "storage": {"home": str(tmp_path / "home")},
        "run": {"middlewares": {"tool_search": {"enabled": True}}},
        "mcp": {"servers": {"time": time_server(), "gone": {"command": str(tmp_path / "nothing-here")}}},
    }
    path.write_text(json.dumps(config), encoding="utf-8")
    assert run_command(["tools", "list", "--json", "--config", str(path)]) == 1, "a server could not start"
    out, err = capsys.readouterr()
    listing = json.loads(out)
    rows = {row["name"]: row for row in listing["tools"]}
    assert rows["bash"]["server"] is None and rows["bash"]["deferred"] is False
    assert rows["tool_search"]["deferred"] is False
    assert rows["time_get_current_time"] == {
        "name": "time_get_current_time",
        "server": "time",
        "source": "mcp:time",
        "deferred": True,
        "description": "Get current time in a specific timezone",
    }
    [error] = listing["errors"]
    assert error["server"] == "gone" and error["error"].startswith("MCP server 'gone' cannot start:")
    assert "MCP server 'gone' cannot start" in err

    config["run"] = {}
    config["mcp"] = {"servers": {"time": time_server()}}
    path.write_text(json.dumps(config), encoding="utf-8")
    assert run_command(["tools", "list", "--config", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[:2] == ["time_convert_time", "mcp:time"] for line in lines)
    assert not any("deferred" in line for line in lines), "nothing is deferred without tool_search"
