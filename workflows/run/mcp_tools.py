"""MCP tools in a run: discovery once per run, and each call as an activity (deterministic wiring only).

* :func:`discover` — the ``mcp.list_tools`` activity, once at the start of a run that has servers configured
  (``RunSettings.mcp_servers``); its recorded result is the run's MCP catalog for the whole run (replays read it
  back, a continue-as-new carries it), so a server that changes shows up in the next run, never mid-run. A
  server that could not start or list comes back with its error; the run goes on with the others' tools.
* :func:`call` — one MCP tool call: the ``mcp.call_tool`` activity with the run's tool-call policy (heartbeats,
  the tool timeout and retry policy of ``RunSettings.tool_call``). A result the server flagged ``isError`` raises
  :class:`McpToolError`, so ToolErrorHandling turns it into the error ToolMessage like any failed tool.

Tool names follow DeerFlow (``langchain-mcp-adapters`` with ``tool_name_prefix``): ``<server>_<tool>``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from langchain_core.messages import ToolMessage
from temporalio.common import RetryPolicy

from middlewares._activity_call import call_activity
from middlewares.base import Command, ToolCallRequest, ToolResult
from middlewares.context import ActivityOptions, RunContext
from vocabulary.contracts import (
    MCP_CALL_TOOL,
    MCP_LIST_TOOLS,
    McpCallInput,
    McpCallOutput,
    McpListToolsInput,
    McpListToolsResult,
    McpToolInfo,
)
from vocabulary.tools import MCP_IMAGES_KEY, ToolSpec

_DISCOVERY_OPTIONS = ActivityOptions(
    start_to_close=timedelta(seconds=120),
    heartbeat=timedelta(seconds=30),
    # A server that cannot start is reported in the result, not raised: only a worker lost mid-discovery retries.
    retry=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3),
)


class McpToolError(Exception):
    """The MCP server answered the call with ``isError``; the message is the text it returned."""


def tool_spec(info: McpToolInfo) -> ToolSpec:
    schema = info.input_schema if info.input_schema.get("type") == "object" else {"type": "object", "properties": {}}
    return ToolSpec(info.name, info.description, schema, server=info.server, remote_name=info.remote_name)


def usable_tools(result: McpListToolsResult, taken: set[str]) -> tuple[list[McpToolInfo], list[str]]:
    """The discovered tools a run can offer, in server order, and a note for each one it cannot: a name a
    built-in or an earlier tool already has (the first keeps it)."""
    tools: list[McpToolInfo] = []
    notes: list[str] = []
    names = set(taken)
    for server in result.servers:
        for tool in server.tools:
            if tool.name in names:
                notes.append(f"MCP tool {tool.name!r} of server {server.server!r} is skipped: the name is taken")
                continue
            names.add(tool.name)
            tools.append(tool)
    return tools, notes


async def run_tools(ctx: RunContext, servers: list[str], *, taken: set[str]) -> list[McpToolInfo]:
    """Discover the servers' tools and keep those the run can offer (see :func:`usable_tools`)."""
    tools, notes = usable_tools(await discover(ctx, servers), taken)
    for note in notes:
        ctx.emit("mcp_tool_skipped", note=note)
    return tools


async def discover(ctx: RunContext, servers: list[str]) -> McpListToolsResult:
    result = await call_activity(
        ctx,
        MCP_LIST_TOOLS,
        McpListToolsInput(list(servers), ctx.thread.user_id),
        summary=f"discover MCP tools · {', '.join(servers)}",
        options=_DISCOVERY_OPTIONS,
    )
    for server in result.servers:
        if server.error is not None:
            ctx.emit("mcp_server_unavailable", server=server.server, error=server.error)
    return result


async def execute(request: ToolCallRequest, *, summary: str) -> ToolResult:
    """One MCP tool call as the run's tool result: a ToolMessage, or a Command that also records the images it
    returned in ``viewed_images``."""
    ctx, tool = request.ctx, request.tool
    assert tool is not None
    output = await call(ctx, tool, request.args, summary=summary)
    ctx.emit("tool_result", tool=tool.name, call_id=request.call_id, status="success")
    message = ToolMessage(output.content, tool_call_id=request.call_id, name=tool.name, id=ctx.uuid())
    if not output.viewed_images:
        return message
    message.additional_kwargs[MCP_IMAGES_KEY] = sorted(output.viewed_images)
    return Command(update={"viewed_images": dict(output.viewed_images), "messages": [message]})


async def call(ctx: RunContext, tool: ToolSpec, args: Any, *, summary: str) -> McpCallOutput:
    if tool.server is None or tool.remote_name is None:
        raise ValueError(f"{tool.name!r} is not an MCP tool")
    output = await call_activity(
        ctx,
        MCP_CALL_TOOL,
        McpCallInput(
            ctx.thread, tool.server, tool.remote_name, tool.name, dict(args) if isinstance(args, dict) else {}
        ),
        summary=summary,
        options=ctx.tool_calls.options,
    )
    if output.is_error:
        raise McpToolError(output.content.strip() or f"MCP tool {tool.remote_name!r} of server {tool.server!r} failed")
    return output
