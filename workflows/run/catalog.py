"""The run's tools, completed once at its start: the profile's catalog (the built-ins and the chain's own tools,
``workflows/run/profile.py``) joined by the configured tools (``tools:``, ``workflows/run/configured_tools.py``)
and the MCP servers' tools (``workflows/run/mcp_tools.py``), each discovered once per run or carried across
continue-as-new. MCP tools also rebuild the chain, which defers them behind ``tool_search``. A subagent gets the
lead's configured tools its type allows from its task (``workflows/run/delegation.py``), as DeerFlow's subagents
inherit the lead's tools. Runs without configured or MCP tools (and subagents) issue no command here.
"""

from __future__ import annotations

import workflows.run.configured_tools as configured_tools
import workflows.run.mcp_tools as mcp_tools
from middlewares.base import Middleware
from middlewares.context import RunContext
from middlewares.deferred_tool_filter import TOOL_SEARCH
from vocabulary.tools import ToolCatalog
from workflows.run.fields import RunFields
from workflows.run.io import RunInput
from workflows.run.profile import RunProfile


async def with_discovered_tools(
    ctx: RunContext,
    input: RunInput,
    fields: RunFields,
    profile: RunProfile,
    chain: list[Middleware],
    catalog: ToolCatalog,
) -> tuple[list[Middleware], ToolCatalog]:
    """The run's chain and catalog once its configured and MCP tools have joined ``chain`` and ``catalog`` (the
    discovered tools are recorded in ``fields``); ``chain`` and ``catalog`` themselves when there are none."""
    if profile.discovers_mcp:
        configured = await configured_tools.run_tools(ctx, input, fields, taken=set(catalog.names()))
    else:  # a subagent: the lead's configured tools its type may use, as the lead discovered them
        inherited = input.subagent.configured_tools if input.subagent is not None else []
        configured = [tool.spec() for tool in inherited if tool.name not in catalog.names()]
    if not (profile.discovers_mcp and input.settings.mcp_servers):
        if configured:
            catalog = profile.catalog(input.settings, chain, (), configured)
        return chain, catalog
    carried = input.carried.mcp_tools if input.carried is not None else None
    if carried is None:
        taken = set(catalog.names()) | {TOOL_SEARCH} | {tool.name for tool in configured}
        carried = await mcp_tools.run_tools(ctx, list(input.settings.mcp_servers), taken=taken)
    fields.mcp_tools = carried
    specs = [mcp_tools.tool_spec(tool) for tool in carried]
    chain = profile.build_chain(input.settings, specs)
    return chain, profile.catalog(input.settings, chain, specs, configured)
