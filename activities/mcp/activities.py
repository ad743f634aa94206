"""``mcp.list_tools`` and ``mcp.call_tool``: the MCP servers of this worker's config, through its session pool.

Discovery asks every requested server in parallel and reports a server that cannot start (or list) in the
result, naming it, so the run goes on with the others. A call that loses its transport (the server crashed,
the connection dropped) drops the pooled session and fails the attempt, so the tool retry policy's next
attempt starts a new session; a protocol error the server answered (an unknown tool, bad arguments) is final.
Both heartbeat while they wait, so a worker that dies mid-call is noticed within the heartbeat timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TypeVar

import mcp_types as types
from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.contract import implements
from activities.heartbeat import heartbeating
from activities.mcp.content import render
from activities.mcp.overlay import load_overlay, resolved_user_server
from activities.mcp.pool import McpSessionPool, describe_failure
from activities.mcp.settings import McpConfigError, McpServerSettings, ResolvedServer, redact, resolve
from activities.storage import ObjectStore
from activities.thread_files import ThreadFiles
from vocabulary.contracts import (
    MCP_CALL_TOOL,
    MCP_LIST_TOOLS,
    McpCallInput,
    McpCallOutput,
    McpListToolsInput,
    McpListToolsResult,
    McpServerTools,
    McpToolInfo,
)

T = TypeVar("T")
_HEARTBEAT_SECONDS = 5.0


class McpActivities:
    def __init__(
        self,
        servers: Mapping[str, McpServerSettings],
        *,
        files: ThreadFiles | None = None,
        pool: McpSessionPool | None = None,
        environ: Mapping[str, str] | None = None,
        objects: ObjectStore | None = None,
    ) -> None:
        self._servers = dict(servers)
        self._objects = objects
        """Where users' own servers are (``activities/mcp/overlay.py``); ``None``: the config's servers only."""
        self._files = files
        self.pool = pool or McpSessionPool()
        self._environ = environ

    @implements(MCP_LIST_TOOLS)
    async def list_tools(self, input: McpListToolsInput) -> McpListToolsResult:
        reports = await heartbeating(
            asyncio.gather(*(self._list(name, input.user_id) for name in input.servers)), _HEARTBEAT_SECONDS
        )
        return McpListToolsResult(list(reports))

    @implements(MCP_CALL_TOOL)
    async def call_tool(self, input: McpCallInput) -> McpCallOutput:
        try:
            server = await self._resolve(input.server, input.thread.user_id)
        except McpConfigError as exc:
            raise ApplicationError(str(exc), type="McpConfigError", non_retryable=True) from None
        try:
            pooled = await self.pool.get(server)
        except Exception as exc:
            raise ApplicationError(describe_failure(server, exc), type="McpUnavailable") from None
        try:
            result = await heartbeating(
                pooled.session.call_tool(input.tool, input.args, _read_timeout()), _HEARTBEAT_SECONDS
            )
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                await self.pool.discard(pooled)
                raise ApplicationError(describe_failure(server, exc), type="McpConnectionClosed") from None
            # The server answered: the same call would get the same answer.
            message = redact(f"MCP server {server.name!r}: {exc.message}", server.secrets)
            raise ApplicationError(message, type="McpError", non_retryable=exc.code != types.REQUEST_TIMEOUT) from None
        except Exception as exc:
            await self.pool.discard(pooled)
            raise ApplicationError(describe_failure(server, exc), type="McpTransportError") from None
        rendered = await asyncio.to_thread(render, result, tool_name=input.name, thread=input.thread, files=self._files)
        text = redact(rendered.text, server.secrets)
        return McpCallOutput(text, is_error=result.is_error, viewed_images=rendered.viewed_images)

    async def _list(self, name: str, user_id: str | None) -> McpServerTools:
        try:
            server = await self._resolve(name, user_id)
        except McpConfigError as exc:
            return McpServerTools(name, error=str(exc))
        try:
            pooled = await self.pool.get(server)
            tools = await _all_tools(pooled.session)
        except Exception as exc:
            return McpServerTools(name, error=describe_failure(server, exc))
        prefix = f"{name}_" if server.settings.tool_name_prefix else ""
        return McpServerTools(
            name,
            [
                McpToolInfo(name, prefix + tool.name, tool.name, tool.description or "", dict(tool.input_schema))
                for tool in tools
            ],
        )

    async def _resolve(self, name: str, user_id: str | None) -> ResolvedServer:
        """The config's server of that name, else the user's own (read now: an edit reaches the next session)."""
        settings = self._servers.get(name)
        if settings is not None:
            return resolve(name, settings, self._environ)
        if user_id is not None and self._objects is not None:
            own = (await asyncio.to_thread(load_overlay, self._objects, user_id)).servers.get(name)
            if own is not None and own.enabled:
                return resolved_user_server(name, own)
        raise McpConfigError(f"MCP server {name!r} is not configured (or not enabled) on this worker")

    async def close(self) -> None:
        await self.pool.close()


async def _all_tools(session: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


def _read_timeout() -> float | None:
    """The attempt's timeout, as the MCP read timeout too: a call that never answers ends with the attempt even if
    Temporal's cancellation of the timed-out attempt is late to arrive."""
    if not activity.in_activity():
        return None
    timeout = activity.info().start_to_close_timeout
    return timeout.total_seconds() if timeout else None
