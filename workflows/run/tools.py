"""A turn's tool calls: each through the wrap_tool_call chain, then to its executor (the tool activity, an MCP
server, a configured tool's activity: ``workflows/run/configured_tools.py``, a subagent for ``task``, or the run
itself for ``present_files``: ``workflows/run/present_files.py``), all in parallel.

The run workflow (``workflows/run/workflow.py``) hands each answer to :class:`ToolTurn`, which answers the calls
the model could not form, runs the others, applies their results to the run's state (``RunFields.state``) in call
order and, on a clarification interrupt, pauses the run for the reply (``workflows/run/pause.py``). Calls gated by
ToolApproval wait, together, for their decisions (``workflows/run/approval.py``) once the others have run, then go
through the chain again with them. ``task`` calls go to delegation (``workflows/run/delegate.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.messages import InvalidToolCall, ToolCall, ToolMessage

import workflows.run.configured_tools as configured_tools
import workflows.run.mcp_tools as mcp_tools
from middlewares import patches
from middlewares._activity_call import call_activity
from middlewares.base import Command, ToolCallRequest, ToolResult
from middlewares.context import RunContext
from middlewares.dangling_tool_call import invalid_call_result
from middlewares.sandbox_lease import SandboxLease
from middlewares.tool_approval import ACTION_KIND
from vocabulary.contracts import TOOL_EXECUTE, ToolCallInput
from vocabulary.delegation import TASK_TOOL_NAME
from vocabulary.messages import last_ai_message, message_text
from vocabulary.state import ThreadState
from vocabulary.text import ELLIPSIS, one_line
from vocabulary.tools import ToolCatalog, ToolSpec
from workflows.run.approval import Approvals
from workflows.run.delegate import Delegation
from workflows.run.dispatcher import Dispatcher
from workflows.run.fields import RunFields
from workflows.run.pause import Pause
from workflows.run.present_files import PRESENT_FILES_TOOL_NAME, present_files
from workflows.run.visibility import Visibility


class ToolTurn:
    """Runs a turn's tool calls against the run's ``catalog`` and answers the calls the model could not form."""

    def __init__(
        self,
        ctx: RunContext,
        fields: RunFields,
        catalog: ToolCatalog,
        *,
        visibility: Visibility,
        delegation: Delegation,
        pause: Pause,
        approvals: Approvals,
        commit: Callable[[], Awaitable[None]],
    ) -> None:
        self._ctx = ctx
        self._fields = fields
        self._catalog = catalog
        self._visibility = visibility
        self._delegation = delegation
        self._pause = pause
        """Where the run waits for the reply to a clarification, committing first."""
        self._approvals = approvals
        """Where gated calls wait for their decisions (``workflows/run/approval.py``), committing first."""
        self._commit = commit

    async def take_turn(self, dispatcher: Dispatcher) -> bool:
        """Run the last answer's tool calls; ``False`` when the run ends here (an answer without calls, a
        clarification that timed out, or only ``return_direct`` tools)."""
        ctx, fields = self._ctx, self._fields
        ai = last_ai_message(fields.state.messages)
        calls = list(ai.tool_calls) if ai is not None else []
        # A stop reason means a hard stop (LoopDetection, SafetyFinishReason) cleared this turn's calls so the
        # run ends on it: invalid calls they leave behind must not start another turn.
        invalid = list(ai.invalid_tool_calls) if ai is not None and not ctx.stop_reason else []
        if invalid and ctx.patched(patches.ANSWER_INVALID_TOOL_CALLS):
            # DeerFlow leaves such calls dangling until the next model request patches them, so a turn of
            # only invalid calls ends the run on a broken answer. Answering them with the same error text
            # lets the model see what was wrong and try again in this run (recursion_limit still bounds it).
            fields.apply({"messages": [self._invalid_call_result(call) for call in invalid]}, ctx.uuid)
            if not calls:
                return True
        if not calls:
            if ai is not None:
                fields.final_message = message_text(ai)
            return False
        interrupt = await self._run_calls(dispatcher, calls)
        if interrupt is not None:
            answer = await self._pause.wait(interrupt, self._commit)
            if answer is None:
                return False
            fields.apply({"messages": [answer]}, ctx.uuid)
            return True
        return not self._ends_run(calls)

    async def _run_calls(self, dispatcher: Dispatcher, calls: list[ToolCall]) -> dict[str, Any] | None:
        """Run the calls in parallel against the same state, apply their results in call order (the gated ones
        once decided), and return the first clarification interrupt among them (``None`` when none asked)."""
        state = self._fields.state
        results = await asyncio.gather(
            *(self._run_tool(dispatcher, state, dict(call)) for call in calls), return_exceptions=True
        )
        actions: list[dict[str, Any]] = []
        interrupt = self._apply(results, actions)
        if actions:
            interrupt = await self._run_reviewed(dispatcher, calls, actions) or interrupt
        return interrupt

    def _apply(self, results: list[Any], actions: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Apply the results in call order; the first clarification interrupt among them, the approval actions
        gathered into ``actions``."""
        interrupt: dict[str, Any] | None = None
        for result in results:
            if isinstance(result, Command):
                self._fields.apply(result.update, self._ctx.uuid)
                if (result.interrupt or {}).get("kind") == ACTION_KIND:
                    actions.append(result.interrupt or {})
                else:
                    interrupt = interrupt or result.interrupt
            elif not isinstance(result, BaseException):
                self._fields.apply({"messages": [result]}, self._ctx.uuid)
        failed = _first_failure(results)
        if failed is not None:
            raise failed
        return interrupt

    async def _run_reviewed(
        self, dispatcher: Dispatcher, calls: list[ToolCall], actions: list[dict[str, Any]]
    ) -> dict[str, Any] | None:
        """Pause for the decisions on the gated calls, then send each through the chain again with its decision:
        an edited call with its edited args, which the answer's AIMessage shows from then on (the call that ran)."""
        decisions = await self._approvals.decide(actions, self._commit)
        edited = {
            call_id: decision["edited_action"]["args"]
            for call_id, decision in decisions.items()
            if decision["type"] == "edit"
        }
        ai = last_ai_message(self._fields.state.messages)
        if edited and ai is not None:
            revised = [{**call, "args": edited.get(str(call.get("id")), call["args"])} for call in ai.tool_calls]
            self._fields.apply({"messages": [ai.model_copy(update={"tool_calls": revised})]}, self._ctx.uuid)
        state = self._fields.state
        reviewed = [
            (dict(call, args=edited.get(str(call.get("id")), call["args"])), decisions[str(call.get("id"))])
            for call in calls
            if str(call.get("id")) in decisions
        ]
        results = await asyncio.gather(
            *(self._run_tool(dispatcher, state, call, review) for call, review in reviewed), return_exceptions=True
        )
        return self._apply(results, [])

    def _ends_run(self, calls: list[ToolCall]) -> bool:
        """Whether the run ends after these calls: all of them are ``return_direct`` tools."""
        return all((spec := self._catalog.get(c["name"])) is not None and spec.return_direct for c in calls)

    def _invalid_call_result(self, call: InvalidToolCall) -> ToolMessage:
        result = invalid_call_result(call, message_id=self._ctx.uuid())
        self._ctx.emit("tool_result", tool=result.name, call_id=result.tool_call_id, status="error")
        return result

    async def _run_tool(
        self, dispatcher: Dispatcher, state: ThreadState, call: dict[str, Any], review: dict[str, Any] | None = None
    ) -> ToolResult:
        spec = self._catalog.get(str(call.get("name")))
        request = ToolCallRequest(dict(call), spec, state, self._ctx, review=review)
        return await dispatcher.call_tool(request, self._execute_tool)

    async def _execute_tool(self, request: ToolCallRequest) -> ToolResult:
        ctx = self._ctx
        name, call_id = request.name, request.call_id
        if request.tool is None or request.tool.intercepted:
            return self._unknown_tool(request)
        if name == TASK_TOOL_NAME:
            return await self._delegation.delegate(request)
        preview = _preview(request.args)
        label = f"{name} · {preview}" if preview else name
        self._fields.last_tool = label
        self._visibility.update_details()
        ctx.emit("tool_call", tool=name, call_id=call_id, args=preview)
        if request.tool.server is not None:
            return await mcp_tools.execute(request, summary=f"tool {label}")
        if request.tool.execution is not None:
            return await configured_tools.execute(request, summary=f"tool {label}")
        if name == PRESENT_FILES_TOOL_NAME:
            result = present_files(request, ctx.uuid())
            ctx.emit("tool_result", tool=name, call_id=call_id, status="success")
            return result
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
        lease = request.sandbox or SandboxLease()  # a chain without Sandbox keeps no lease
        sandbox_id = lease.for_call(request.state)
        if tool.sandbox:
            lease.starting(sandbox_id)
        output = await call_activity(
            ctx,
            TOOL_EXECUTE,
            ToolCallInput(ctx.thread, request.tool_call, sandbox_id=sandbox_id, run_key=ctx.workflow_id),
            summary=f"tool {label}",
            options=ctx.tool_calls.options,
        )
        lease.reported(output.sandbox_id, needs_release=output.sandbox_needs_release)
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
