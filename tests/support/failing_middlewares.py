"""Test middlewares that make a run fail on purpose, loaded through ``run.extensions`` (``module:Class``)."""

from __future__ import annotations

from langchain_core.messages import AIMessage

from middlewares.base import Middleware
from middlewares.context import RunContext
from vocabulary.state import StateUpdate, ThreadState


class FailOnFinalAnswer(Middleware):
    """after_model: raises once the model answers without tool calls, so the run fails after its tools ran."""

    async def after_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        last = state.messages[-1]
        if isinstance(last, AIMessage) and not last.tool_calls:
            raise RuntimeError("deliberate failure after the final answer")
        return None
