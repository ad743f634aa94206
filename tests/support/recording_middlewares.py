"""Test middlewares, loaded into runs through ``run.extensions`` (``module:Class``, zero-arg, as DeerFlow).

Each records every hook it sees as a ``hook`` progress event (read back with the run's ``events`` query),
so a test can assert the exact dispatch order on a real workflow.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage

from middlewares.base import (
    Command,
    Middleware,
    ModelHandler,
    ModelRequest,
    ToolCallRequest,
    ToolHandler,
    ToolResult,
)
from middlewares.context import RunContext
from vocabulary.state import StateUpdate, ThreadState


class _Recorder(Middleware):
    label = "?"

    def _record(self, ctx: RunContext, hook: str, phase: str = "") -> None:
        ctx.emit("hook", middleware=self.label, hook=hook, phase=phase)

    async def before_agent(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        self._record(ctx, "before_agent")
        return None

    async def before_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        self._record(ctx, "before_model")
        return None

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AIMessage:
        self._record(request.ctx, "wrap_model_call", "enter")
        result = await handler(request)
        self._record(request.ctx, "wrap_model_call", "exit")
        return result

    async def after_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        self._record(ctx, "after_model")
        return None

    async def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolResult:
        self._record(request.ctx, "wrap_tool_call", "enter")
        result = await handler(request)
        self._record(request.ctx, "wrap_tool_call", "exit")
        return result

    async def after_agent(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        self._record(ctx, "after_agent")
        return None


class RecorderA(_Recorder):
    label = "A"


class RecorderB(_Recorder):
    label = "B"


class RecorderC(_Recorder):
    label = "C"


class JumpBackOnce(Middleware):
    """after_model: the first time the model asks for tools, send it back to the model instead."""

    def __init__(self) -> None:
        self.jumped = False

    async def after_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        last = state.messages[-1]
        if self.jumped or not isinstance(last, AIMessage) or not last.tool_calls:
            return None
        self.jumped = True
        ctx.emit("hook", middleware="JumpBackOnce", hook="after_model", phase="jump")
        return {"jump_to": "model"}


class ShortCircuitModel(Middleware):
    """wrap_model_call: answer without calling the model."""

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AIMessage:
        return AIMessage("answered by middleware", id=request.ctx.uuid())


class TagToolResults(Middleware):
    """wrap_tool_call: turns each ToolMessage into a Command that also writes the ``artifacts`` channel."""

    async def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolResult:
        result = await handler(request)
        return Command(update={"messages": [result], "artifacts": [f"/tagged/{request.call_id}"]})
