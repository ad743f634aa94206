"""A turn's tool calls: each through the wrap_tool_call chain, then to its executor (the tool activity, an MCP
server, or a subagent for ``task``), all in parallel.

A mixin of the run workflow (``workflows/run/workflow.py``).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from langchain_core.messages import InvalidToolCall, ToolCall, ToolMessage
from temporalio.common import RetryPolicy

import workflows.run.mcp_tools as mcp_tools
from middlewares.base import Command, ToolCallRequest, ToolResult
from middlewares.context import ActivityOptions
from middlewares.dangling_tool_call import invalid_call_result
from vocabulary.contracts import TOOL_EXECUTE, ToolCallInput, ToolCallOutput
from vocabulary.delegation import TASK_TOOL_NAME
from vocabulary.state import StateUpdate, ThreadState
from vocabulary.text import ELLIPSIS, one_line
from vocabulary.tools import ToolCatalog, ToolSpec
from workflows.run.delegate import RunDelegation
from workflows.run.dispatcher import Dispatcher


class RunTools(RunDelegation):
    """Runs a turn's tool calls and answers the calls the model could not form."""

    _catalog: ToolCatalog
    _state: ThreadState

    if TYPE_CHECKING:
        # Provided by the run workflow.
        def _apply(self, update: StateUpdate) -> None: ...

    async def _run_tools(self, dispatcher: Dispatcher, calls: list[ToolCall]) -> dict[str, Any] | None:
        """Run the calls in parallel against the same state, apply their results in call order, and return the
        first clarification interrupt among them (``None`` when none asked)."""
        state = self._state
        results = await asyncio.gather(
            *(self._run_tool(dispatcher, state, dict(call)) for call in calls), return_exceptions=True
        )
        interrupt: dict[str, Any] | None = None
        for result in results:
            if isinstance(result, Command):
                self._apply(result.update)
                interrupt = interrupt or result.interrupt
            elif not isinstance(result, BaseException):
                self._apply({"messages": [result]})
        failed = _first_failure(results)
        if failed is not None:
            raise failed
        return interrupt

    def _invalid_call_result(self, call: InvalidToolCall) -> ToolMessage:
        result = invalid_call_result(call, message_id=self._ctx.uuid())
        self._ctx.emit("tool_result", tool=result.name, call_id=result.tool_call_id, status="error")
        return result

    async def _run_tool(self, dispatcher: Dispatcher, state: ThreadState, call: dict[str, Any]) -> ToolResult:
        request = ToolCallRequest(dict(call), self._catalog.get(str(call.get("name"))), state, self._ctx)
        return await dispatcher.call_tool(request, self._execute_tool)

    async def _execute_tool(self, request: ToolCallRequest) -> ToolResult:
        ctx = self._ctx
        name, call_id = request.name, request.call_id
        if request.tool is None or request.tool.intercepted:
            return self._unknown_tool(request)
        if name == TASK_TOOL_NAME:
            return await self._delegate(request)
        preview = _preview(request.args)
        label = f"{name} · {preview}" if preview else name
        self._last_tool = label
        self._update_details()
        ctx.emit("tool_call", tool=name, call_id=call_id, args=preview)
        if request.tool.server is not None:
            return await mcp_tools.execute(request, summary=f"tool {label}")
        return await self._call_tool_activity(request, request.tool, label)

    def _unknown_tool(self, request: ToolCallRequest) -> ToolMessage:
        available = ", ".join(self._catalog.names())
        return ToolMessage(
            f"Error: {request.name} is not a valid tool, try one of [{available}].",
            tool_call_id=request.call_id,
            name=request.name,
            status="error",
            id=self._ctx.uuid(),
        )

    async def _call_tool_activity(self, request: ToolCallRequest, tool: ToolSpec, label: str) -> ToolMessage:
        """A built-in tool, run by the tool activity (in the thread's sandbox when the tool needs one)."""
        ctx = self._ctx
        name, call_id = request.name, request.call_id
        settings = ctx.settings.tool_call
        sandbox_id = ctx.sandbox_id or (request.state.sandbox or {}).get("sandbox_id")
        if sandbox_id is None and tool.sandbox:
            ctx.sandbox_unreported = True  # until an id comes back: a cancellation or failure may leave it so
        output = await ctx.call(
            TOOL_EXECUTE,
            ToolCallInput(ctx.thread, request.tool_call, sandbox_id=sandbox_id, run_key=ctx.workflow_id),
            result_type=ToolCallOutput,
            summary=f"tool {label}",
            options=ActivityOptions(
                start_to_close=timedelta(seconds=settings.timeout_seconds),
                heartbeat=timedelta(seconds=settings.heartbeat_seconds),
                retry=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=settings.max_attempts),
            ),
        )
        if output.sandbox_id:
            ctx.sandbox_id = output.sandbox_id
            ctx.sandbox_unreported = False
        ctx.emit("tool_result", tool=name, call_id=call_id, status=output.status)
        return ToolMessage(
            output.content,
            tool_call_id=call_id,
            name=name,
            status=output.status,
            artifact=output.artifact,
            id=ctx.uuid(),
        )


def _first_failure(results: list[Any]) -> BaseException | None:
    """The failure to raise from a turn's tool calls: a teardown (cancellation, eviction) before any ordinary
    failure, so an ordinary error of one call never masks the end of the run; ``None`` when all succeeded."""
    failures = [result for result in results if isinstance(result, BaseException)]
    teardown = [failure for failure in failures if not isinstance(failure, Exception)]
    return next(iter(teardown or failures), None)


def _preview(args: Any, limit: int = 60) -> str:
    if isinstance(args, dict):
        for key in ("command", "path", "pattern", "question"):
            if isinstance(args.get(key), str):
                return one_line(args[key], limit, ELLIPSIS)
    return ""
