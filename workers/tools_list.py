"""``hartflow tools list``: every tool a run started with this config would get, built-in, configured
(``tools:``: built here as the worker builds them, ``$VAR`` settings from this environment) and MCP, with where it
comes from (``built-in``, ``web:ddg``, ``langchain:pkg.mod:attr``, ``function:...``, ``activity:NAME@QUEUE``,
``mcp:SERVER``) and whether it is deferred (hidden until ``tool_search`` promotes it).

It discovers the MCP servers' tools the way a run does (the ``mcp.list_tools`` implementation, in this
process) and builds the run's chain and catalog from them, so the list is what the model would be offered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from activities.mcp.activities import McpActivities
from middlewares.chain import build_lead_chain
from middlewares.deferred_tool_filter import TOOL_SEARCH, DeferredToolFilterMiddleware
from middlewares.run_settings import RunSettings
from vocabulary.contracts import McpListToolsInput, McpListToolsResult
from vocabulary.contracts.configured_tools import ToolsDescribeInput
from vocabulary.tools import ToolCatalog, ToolSpec
from workers.config import HartflowConfig
from workers.worker import configured_tools
from workflows.run.configured_tools import configured_names, unlisted_sandbox_tools
from workflows.run.mcp_tools import tool_spec, usable_tools


@dataclass
class ToolListing:
    tools: list[dict[str, Any]]
    errors: list[dict[str, str]]
    """One entry per MCP server that could not start or list its tools (``server``, ``error``)."""

    def payload(self) -> dict[str, Any]:
        return {"tools": self.tools, "errors": self.errors}


def _catalog(
    settings: RunSettings, mcp: list[ToolSpec], configured: list[ToolSpec]
) -> tuple[ToolCatalog, frozenset[str]]:
    chain = build_lead_chain(settings, mcp_tools=mcp)
    exclude = frozenset({"ask_clarification"}) if settings.non_interactive else frozenset()
    catalog = (
        ToolCatalog.builtin(exclude=exclude | unlisted_sandbox_tools(settings))
        .with_tools(t for mw in chain for t in mw.tools())
        .with_tools(configured)
        .with_tools(mcp)
    )
    deferred = next((mw.catalog.names for mw in chain if isinstance(mw, DeferredToolFilterMiddleware)), frozenset())
    return catalog, deferred


async def list_tools(config: HartflowConfig) -> ToolListing:
    settings = config.run
    result = McpListToolsResult([])
    if settings.mcp_servers:
        mcp = McpActivities(config.mcp.enabled())
        try:
            result = await mcp.list_tools(McpListToolsInput(list(settings.mcp_servers)))
        finally:
            await mcp.close()
    built = configured_tools(config)
    described = await built.describe(ToolsDescribeInput(configured_names(settings)))
    sources = {tool.name: tool.source for tool in described.tools}
    configured = [tool.spec() for tool in described.tools]
    builtin, _ = _catalog(settings, [], configured)
    found, _notes = usable_tools(result, set(builtin.names()) | {TOOL_SEARCH})
    catalog, deferred = _catalog(settings, [tool_spec(tool) for tool in found], configured)
    tools = [
        {
            "name": tool.name,
            "server": tool.server,
            "source": f"mcp:{tool.server}" if tool.server else sources.get(tool.name, "built-in"),
            "deferred": tool.name in deferred,
            "description": (tool.description.strip().splitlines() or [""])[0],
        }
        for tool in catalog.tools.values()
    ]
    errors = [{"server": s.server, "error": s.error} for s in result.servers if s.error is not None]
    return ToolListing(tools, errors)


def print_listing(listing: ToolListing) -> None:
    width = max((len(tool["name"]) for tool in listing.tools), default=4)
    for tool in listing.tools:
        source = tool["source"]
        flag = "deferred" if tool["deferred"] else ""
        print(f"{tool['name']:<{width}}  {source:<24} {flag:<8}  {tool['description'][:80]}".rstrip())
