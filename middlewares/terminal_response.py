"""TerminalResponse: a turn that used tools ends with an answer the user can see (DeerFlow's
``TerminalResponseMiddleware``, always on in the lead chain, DeerFlow #4027).

Some models answer a tool result with nothing: no text, no tool call. The run would end with an empty message.

Hooks
* ``after_model``: when the last AIMessage has no visible text and no tool intent (tool calls, invalid ones, raw
  ``tool_calls``/``function_call``, or ``finish_reason`` ``tool_calls``/``function_call``) and a ToolMessage follows
  the latest user message that is not hidden, the first time in the run the empty message is removed
  (``RemoveMessage``, **thread state**) and the run jumps back to the model (``jump_to: model``) with a recovery
  prompt queued; the second time the message is kept with DeerFlow's fallback text and
  ``deerflow_error_fallback`` (the run ends as ``error``). The budget is one retry per run, not per message, so
  an empty → retry → tool → empty loop cannot go on.
* ``wrap_model_call`` — request overlay: the queued prompt is appended once, as a hidden ``HumanMessage`` named
  ``terminal_response_recovery``, on the next model call only (drained, so an LLM retry does not see it again).
* ``before_agent`` / ``after_agent``: the budget and the queue start empty for each run.

The retry adds a model call a run before this middleware did not make, so it is taken only in runs that record
the ``hartflow-terminal-response`` patch (``ctx.patched``); a replayed older run keeps its empty answer.

Writes: thread state (the removal or the fallback), the request overlay; per-run memory (retried, queued) carried
across continue-as-new.

Parts: the jump back is the run loop's (``workflows/run/workflow.py``); an error fallback makes the run's status
``error`` (``workflows/run/view.py``). Tests: ``tests/test_finish_reasons.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage, ToolMessage

from middlewares import patches
from middlewares.base import Middleware, ModelHandler, ModelRequest
from middlewares.context import RunContext
from middlewares.model_length_finish_reason import has_tool_call_intent, has_visible_content
from vocabulary.state import StateUpdate, ThreadState

RECOVERY_PROMPT = (
    "<system_reminder>\n"
    "Your previous response after the tool execution was empty. Review the tool results "
    "already present in the conversation and provide a concise, user-visible final response. "
    "Do not call another tool unless it is strictly necessary.\n"
    "</system_reminder>"
)
FALLBACK_CONTENT = (
    "The model completed the tool run but returned no final response, including after one automatic retry. "
    "Please try again or use a different model."
)
RECOVERY_MESSAGE_NAME = "terminal_response_recovery"
_TOOL_CALL_FINISH_REASONS = frozenset({"tool_calls", "function_call"})


class TerminalResponseMiddleware(Middleware):
    def __init__(self) -> None:
        self._retried = False
        self._pending = False

    async def before_agent(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        self._retried = self._pending = False
        return None

    async def after_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        last = state.messages[-1] if state.messages else None
        if not isinstance(last, AIMessage) or has_visible_content(last) or _has_tool_intent(last):
            return None
        if not tool_result_in_current_turn(state.messages) or not ctx.patched(patches.TERMINAL_RESPONSE):
            return None
        if not self._retried:
            self._retried = self._pending = True
            ctx.emit("terminal_response_retry", message_id=last.id)
            return {"messages": [RemoveMessage(id=last.id)] if last.id else [], "jump_to": "model"}
        kwargs = {
            **last.additional_kwargs,
            "deerflow_error_fallback": True,
            "error_reason": "Model returned an empty terminal response after one retry",
        }
        return {"messages": [last.model_copy(update={"content": FALLBACK_CONTENT, "additional_kwargs": kwargs})]}

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AIMessage:
        if self._pending:
            self._pending = False
            reminder = HumanMessage(
                RECOVERY_PROMPT, name=RECOVERY_MESSAGE_NAME, additional_kwargs={"hide_from_ui": True}
            )
            request = request.override(messages=[*request.messages, reminder])
        return await handler(request)

    async def after_agent(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        self._retried = self._pending = False
        return None

    def export_memory(self) -> dict[str, Any] | None:
        return {"retried": self._retried, "pending": self._pending}

    def import_memory(self, memory: dict[str, Any]) -> None:
        self._retried = bool(memory.get("retried"))
        self._pending = bool(memory.get("pending"))


def _has_tool_intent(message: AIMessage) -> bool:
    finish_reason = (message.response_metadata or {}).get("finish_reason")
    return has_tool_call_intent(message) or finish_reason in _TOOL_CALL_FINISH_REASONS


def tool_result_in_current_turn(messages: Sequence[BaseMessage]) -> bool:
    """A ToolMessage follows the latest HumanMessage that is not hidden (runs with no such message: never)."""
    latest_user = -1
    for index, message in enumerate(messages):
        if isinstance(message, HumanMessage) and not (message.additional_kwargs or {}).get("hide_from_ui"):
            latest_user = index
    return latest_user >= 0 and any(isinstance(m, ToolMessage) for m in messages[latest_user + 1 :])
