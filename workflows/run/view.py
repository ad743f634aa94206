"""What clients read of a run: the view the ``status`` query, the ``wait_settled`` update and the run's result
return, the view a closed run archives, and the ``state`` query's brief. The handlers are on the run workflow
(``workflows/run/workflow.py``); these functions build their answers from the run's fields.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from langchain_core.messages import AIMessage
from temporalio.exceptions import is_cancelled_exception

from middlewares.base import Middleware
from middlewares.chain import describe
from middlewares.context import RunContext
from vocabulary.causes import root_cause
from vocabulary.messages import last_ai_message, message_text
from vocabulary.state import ThreadState
from vocabulary.text import ELLIPSIS, one_line
from workflows.run.fields import RunFields
from workflows.run.io import RunStatus, RunView


def run_view(ctx: RunContext, fields: RunFields, chain: list[Middleware], usage: dict[str, int] | None) -> RunView:
    """The run as clients see it now (``usage``: its token totals, which the run's profile knows how to count)."""
    return RunView(
        thread_id=ctx.thread_id,
        run_id=ctx.run_id,
        workflow_id=ctx.workflow_id,
        status=fields.status,
        stop_reason=ctx.stop_reason,
        final_message=fields.final_message,
        pending_input=fields.pending,
        turns=ctx.turn,
        model=ctx.model,
        usage=usage,
        chain=describe(chain),
    )


def closing_status(fields: RunFields, failure: BaseException | None) -> RunStatus:
    """How the run ends: ``completed``, ``error`` (a failure, or an answer that is DeerFlow's error fallback) or
    ``cancelled``. The last answer without tool calls becomes the final message, unless there is one already."""
    ai = last_ai_message(fields.state.messages)
    if fields.final_message is None and ai is not None and not ai.tool_calls:
        fields.final_message = message_text(ai)
    if failure is None:
        errored = ai is not None and bool(ai.additional_kwargs.get("deerflow_error_fallback"))
        return "error" if errored else "completed"
    return "cancelled" if is_cancelled_exception(failure) else "error"


def final_view(view: RunView, status: RunStatus, failure: BaseException | None) -> dict[str, Any]:
    """What the archive stores of a closed run: ``view`` with its final status, and the root cause of a failure
    as the final message of a run that failed without one."""
    final = asdict(view)
    final["status"] = status
    final["pending_input"] = None  # a closed run waits for nothing (a cancelled pause leaves its request)
    if status == "error" and failure is not None and final["final_message"] is None:
        final["final_message"] = f"run failed: {root_cause(failure)}"
    return final


def run_error(fields: RunFields, status: RunStatus, failure: BaseException | None) -> dict[str, Any]:
    """Why a run ended in ``error``, for its ``run_finished`` event (``{}`` otherwise): ``{"error": {"type",
    "message"}}`` from DeerFlow's error fallback answer (LLMErrorHandling's ``error_type`` and its text), else from
    the root cause of the failure. API clients get it in the stream's ``error`` frame (``workers/api/stream.py``)."""
    if status != "error":
        return {}
    ai = last_ai_message(fields.state.messages)
    kwargs = ai.additional_kwargs if ai is not None else {}
    if failure is None and kwargs.get("deerflow_error_fallback"):
        assert ai is not None
        return {"error": {"type": str(kwargs.get("error_type") or "LLMError"), "message": message_text(ai)}}
    if failure is None:
        return {}
    root = root_cause(failure)
    kind = getattr(root, "type", None)
    message = str(getattr(root, "message", None) or root)
    return {"error": {"type": kind if isinstance(kind, str) and kind else type(root).__name__, "message": message}}


def state_brief(state: ThreadState) -> dict[str, Any]:
    """The ``state`` query: every channel that has a value; messages and the summary cut to one line each,
    images as their paths only."""
    brief: dict[str, Any] = {
        key: value
        for key, value in state.model_dump(mode="json", exclude={"messages", "viewed_images"}).items()
        if value not in (None, [], {})
    }
    if state.viewed_images:
        brief["viewed_images"] = sorted(state.viewed_images)
    if state.summary_text:
        brief["summary_text"] = one_line(state.summary_text, 200, ELLIPSIS)
    brief["messages"] = [
        {
            "type": message.type,
            **({"name": message.name} if message.name else {}),
            "text": one_line(message_text(message), 200, ELLIPSIS),
            **(
                {"tool_calls": [call["name"] for call in message.tool_calls]}
                if isinstance(message, AIMessage) and message.tool_calls
                else {}
            ),
        }
        for message in state.messages
    ]
    return brief
