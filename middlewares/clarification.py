"""Clarification: ``ask_clarification`` pauses the run until a person answers.

Hooks
* ``wrap_tool_call`` (innermost, so every other guard has already run): intercepts ``ask_clarification`` and
  never executes it. Returns a :class:`Command` whose update appends the clarification ToolMessage
  (thread state) and whose ``interrupt`` carries the ``human_input_request`` payload. The run workflow
  commits the state, pauses with status ``awaiting_input`` and, on a reply, appends the hidden
  ``human_input_response`` HumanMessage and calls the model again (the same run continues).
* In ``non_interactive`` runs it returns DeerFlow's "Clarification is disabled" ToolMessage and the loop goes on.

Writes: thread state (the ToolMessage) and the run's pause (side effect, via the workflow).
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import ToolMessage

from middlewares.base import Command, Middleware, ToolCallRequest, ToolHandler, ToolResult

TOOL_NAME = "ask_clarification"

DISABLED_TEXT = (
    "Clarification is disabled in this context — the human is not present to answer synchronously. "
    "Do not ask for confirmation. Proceed with your best judgment, carry out the requested action, "
    "and state any assumptions you made in your final response."
)

ICONS = {
    "missing_info": "❓",
    "ambiguous_requirement": "🤔",
    "approach_choice": "🔀",
    "risk_confirmation": "⚠️",
    "suggestion": "💡",
}


class ClarificationMiddleware(Middleware):
    def __init__(self, *, non_interactive: bool = False):
        self.non_interactive = non_interactive

    async def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolResult:
        if request.name != TOOL_NAME:
            return await handler(request)
        request_id = f"clarification:{request.call_id}"
        if self.non_interactive:
            return ToolMessage(DISABLED_TEXT, id=request_id, tool_call_id=request.call_id, name=TOOL_NAME)
        args = request.args if isinstance(request.args, dict) else {}
        payload = build_request(request_id, request.call_id, args)
        message = ToolMessage(
            payload_text(payload),
            id=request_id,
            tool_call_id=request.call_id,
            name=TOOL_NAME,
            artifact={"human_input": payload},
        )
        return Command(update={"messages": [message]}, interrupt=payload)


def build_request(request_id: str, tool_call_id: str, args: dict[str, Any]) -> dict[str, Any]:
    """The ``human_input_request`` v1 payload (choices or free text)."""
    options = normalize_options(args.get("options"))
    payload: dict[str, Any] = {
        "version": 1,
        "kind": "human_input_request",
        "source": TOOL_NAME,
        "request_id": request_id,
        "clarification_type": str(args.get("clarification_type") or "missing_info"),
        "question": str(args.get("question") or "").strip(),
        "input_mode": "choice_with_other" if options else "free_text",
        "tool_call_id": tool_call_id,
    }
    if args.get("context"):
        payload["context"] = str(args["context"]).strip()
    if options:
        payload["options"] = [
            {"id": f"option-{i}", "label": label, "value": label} for i, label in enumerate(options, 1)
        ]
    return payload


def normalize_options(raw: Any) -> list[str]:
    if not isinstance(raw, list):
        return []
    cleaned = [str(option).strip() for option in raw if option is not None]
    return list(dict.fromkeys(option for option in cleaned if option))


def payload_text(payload: dict[str, Any]) -> str:
    """The text fallback UIs without cards show (and the model sees as the tool result)."""
    icon = ICONS.get(payload["clarification_type"], "❓")
    text = (
        f"{icon} {payload['context']}\n\n{payload['question']}"
        if payload.get("context")
        else (f"{icon} {payload['question']}")
    )
    options = payload.get("options") or []
    if options:
        text += "\n\n" + "\n".join(f"  {i}. {option['label']}" for i, option in enumerate(options, 1))
    return text
