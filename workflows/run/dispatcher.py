"""The hook dispatcher: the one place that knows the ordering contract.

* ``before_agent`` / ``before_model``: list order. ``after_model`` / ``after_agent``: reverse list order.
* ``wrap_model_call`` / ``wrap_tool_call``: the first middleware in the list is the outermost wrapper.
* A ``jump_to`` from a ``before_*``/``after_*`` hook skips the hooks that would have run after it in that
  phase (in LangGraph each hook is a node and the jump leaves from that node).

Hooks a middleware does not override are skipped entirely, so pure pass-through middlewares cost nothing.

In a traced run every hook call is an OpenTelemetry span named ``Middleware.hook`` (attributes: middleware,
hook, thread, run, turn). A wrap hook's span encloses the spans of the wrappers inside it and of the model or
tool activity, so a trace reads like the chain. The spans come from Temporal's replay-safe tracer provider:
replaying history neither duplicates them nor changes their ids.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from langchain_core.messages import AIMessage
from opentelemetry import trace
from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider

from middlewares.base import Middleware, ModelHandler, ModelRequest, ToolCallRequest, ToolHandler, ToolResult
from middlewares.context import RunContext
from vocabulary.messages import MessageMerger
from vocabulary.state import ThreadState, apply_update

JUMP_TARGETS = frozenset({"model", "end"})
TRACER_NAME = "hartflow.middleware"


@dataclass
class PhaseResult:
    state: ThreadState
    jump_to: str | None = None


class Dispatcher:
    def __init__(self, chain: Sequence[Middleware], ctx: RunContext, merge_messages: MessageMerger | None = None):
        self.chain = list(chain)
        self.ctx = ctx
        self._merge_messages = merge_messages or MessageMerger()
        """The ``messages`` reducer: the run's, so its merges and the hooks' share one id index."""
        self._by_hook = {
            hook: [mw for mw in self.chain if mw.implements(hook)]
            for hook in ("before_agent", "before_model", "after_model", "after_agent")
        }
        self._model_wrappers = [mw for mw in self.chain if mw.implements("wrap_model_call")]
        self._tool_wrappers = [mw for mw in self.chain if mw.implements("wrap_tool_call")]

    async def before_agent(self, state: ThreadState) -> PhaseResult:
        return await self._run_phase("before_agent", state, reverse=False)

    async def before_model(self, state: ThreadState) -> PhaseResult:
        return await self._run_phase("before_model", state, reverse=False)

    async def after_model(self, state: ThreadState) -> PhaseResult:
        return await self._run_phase("after_model", state, reverse=True)

    async def after_agent(self, state: ThreadState) -> PhaseResult:
        return await self._run_phase("after_agent", state, reverse=True)

    async def _run_phase(self, hook: str, state: ThreadState, *, reverse: bool) -> PhaseResult:
        middlewares = self._by_hook[hook]
        for mw in reversed(middlewares) if reverse else middlewares:
            with hook_span(mw, hook, self.ctx):
                update = await getattr(mw, hook)(state, self.ctx)
            if not update:
                continue
            state = apply_update(state, update, new_id=self.ctx.uuid, merge_messages=self._merge_messages)
            jump = update.get("jump_to")
            if jump is not None:
                if jump not in JUMP_TARGETS:
                    raise ValueError(f"{mw.name}.{hook} returned jump_to={jump!r}; expected 'model' or 'end'")
                return PhaseResult(state, jump)
        return PhaseResult(state)

    async def call_model(self, request: ModelRequest, model: ModelHandler) -> AIMessage:
        handler = model
        for mw in reversed(self._model_wrappers):
            handler = functools.partial(_wrap_model, mw, handler)
        return await handler(request)

    async def call_tool(self, request: ToolCallRequest, tool: ToolHandler) -> ToolResult:
        handler = tool
        for mw in reversed(self._tool_wrappers):
            handler = functools.partial(_wrap_tool, mw, handler)
        return await handler(request)


async def _wrap_model(mw: Middleware, inner: ModelHandler, request: ModelRequest) -> AIMessage:
    with hook_span(mw, "wrap_model_call", request.ctx):
        return await mw.wrap_model_call(request, inner)


async def _wrap_tool(mw: Middleware, inner: ToolHandler, request: ToolCallRequest) -> ToolResult:
    with hook_span(mw, "wrap_tool_call", request.ctx, tool=request.name):
        return await mw.wrap_tool_call(request, inner)


@contextlib.contextmanager
def hook_span(mw: Middleware, hook: str, ctx: RunContext, *, tool: str | None = None) -> Iterator[None]:
    """The span of one hook call, when the run is traced.

    Traced means Temporal's OpenTelemetry plugin put a span around this workflow (its context is current) and
    the process's tracer provider is the replay-safe one. Any other provider would emit every span again on
    each replay, so hooks stay untraced rather than wrong.
    """
    if not trace.get_current_span().get_span_context().is_valid or not isinstance(
        trace.get_tracer_provider(), ReplaySafeTracerProvider
    ):
        yield
        return
    attributes: dict[str, str | int] = {
        "hartflow.middleware": mw.name,
        "hartflow.hook": hook,
        "hartflow.thread_id": ctx.thread_id,
        "hartflow.run_id": ctx.run_id,
        "hartflow.turn": ctx.turn,
    }
    if tool is not None:
        attributes["hartflow.tool"] = tool
    with trace.get_tracer(TRACER_NAME).start_as_current_span(f"{mw.name}.{hook}", attributes=attributes):
        yield
