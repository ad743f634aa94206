"""MCP sessions pooled per worker process and per server config: a stdio server is started once and serves
every call of every run on this worker until it dies, and then the next call starts it again.

Each session lives in a task of its own, because the SDK's transports are anyio contexts that must be entered
and left by the same task. The pool never logs or returns a resolved secret: errors go through ``redact``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any

from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from activities.mcp.settings import ResolvedServer, redact

DEFAULT_CONNECT_TIMEOUT = 30.0


class McpUnavailableError(RuntimeError):
    """A server could not be started or reached; the message names it and holds no secret."""


class PooledSession:
    """One live session to one server, owned by its own task until :meth:`close` or the transport dies."""

    def __init__(self, server: ResolvedServer) -> None:
        self.server = server
        self._session: ClientSession | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._error: BaseException | None = None
        self._owner: asyncio.Task[None] | None = None
        self.dead = False

    async def open(self, timeout: float) -> None:
        self._owner = asyncio.create_task(self._own(), name=f"mcp-session-{self.server.name}")
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except TimeoutError:
            await self.close(grace=0)
            raise McpUnavailableError(f"MCP server {self.server.name!r} did not start within {timeout:g} s") from None
        if self._session is None:
            error = self._error
            detail = _describe(error) if error is not None else "it exited"
            raise McpUnavailableError(
                redact(f"MCP server {self.server.name!r} cannot start: {detail}", self.server.secrets)
            )

    @property
    def session(self) -> ClientSession:
        if self._session is None or self.dead:
            raise McpUnavailableError(f"MCP server {self.server.name!r}: the session is closed")
        return self._session

    async def close(self, grace: float = 5.0) -> None:
        """Leave the session's contexts (a stdio server gets its stdin closed and exits); cancel the owner only
        when it does not finish within ``grace`` seconds."""
        self._stop.set()
        owner = self._owner
        if owner is None or owner.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(owner), grace)
        except TimeoutError:
            owner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await owner

    async def _own(self) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(_transport(self.server, stack))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                self._session = session
                self._ready.set()
                await self._stop.wait()
        except Exception as exc:  # the server exited, refused, or never spoke MCP
            self._error = exc
        finally:
            self.dead = True
            self._ready.set()


@contextlib.asynccontextmanager
async def _transport(server: ResolvedServer, stack: contextlib.AsyncExitStack) -> Any:
    settings = server.settings
    if settings.type == "stdio":
        assert settings.command is not None
        params = StdioServerParameters(command=settings.command, args=list(settings.args), env=server.env or None)
        async with stdio_client(params, errlog=sys.__stderr__ or sys.stderr) as streams:
            yield streams
    elif settings.type == "sse":
        assert settings.url is not None
        async with sse_client(settings.url, headers=server.headers or None) as streams:
            yield streams
    else:
        assert settings.url is not None
        client = await stack.enter_async_context(create_mcp_http_client(headers=server.headers or None))
        async with streamable_http_client(settings.url, http_client=client) as streams:
            yield streams


def _describe(error: BaseException) -> str:
    """``Class: message`` of the innermost error (anyio wraps transport failures in exception groups)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


class McpSessionPool:
    def __init__(self, *, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT) -> None:
        self._connect_timeout = connect_timeout
        self._sessions: dict[str, PooledSession] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(self, server: ResolvedServer) -> PooledSession:
        """The live session for ``server``'s config, started (or restarted, if it died) on demand."""
        key = server.fingerprint()
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            pooled = self._sessions.get(key)
            if pooled is not None and not pooled.dead:
                return pooled
            pooled = PooledSession(server)
            await pooled.open(self._connect_timeout)
            self._sessions[key] = pooled
            return pooled

    async def discard(self, pooled: PooledSession) -> None:
        """Drop a session whose transport failed, so the next call (the activity's retry) starts a new one."""
        key = pooled.server.fingerprint()
        if self._sessions.get(key) is pooled:
            del self._sessions[key]
        await pooled.close()

    def started(self) -> int:
        """How many sessions this pool has open (tests check that a stdio server is not spawned per call)."""
        return sum(1 for pooled in self._sessions.values() if not pooled.dead)

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for pooled in sessions:
            await pooled.close()


def describe_failure(server: ResolvedServer, exc: BaseException) -> str:
    if isinstance(exc, McpUnavailableError):
        return str(exc)
    return redact(f"MCP server {server.name!r} failed: {_describe(exc)}", server.secrets)
