"""What clients read of a run: the ``status``, ``pending_input``, ``chain``, ``events`` and ``state`` queries, the
``wait_settled`` update, and the view a finished run returns and archives.

A mixin of the run workflow (``workflows/run/workflow.py``): the handlers are registered under these names on the run
workflow class, which inherits them.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from langchain_core.messages import AIMessage
from temporalio import workflow
from temporalio.workflow import HandlerUnfinishedPolicy

from middlewares.base import Middleware
from middlewares.chain import describe
from middlewares.context import TemporalRunContext
from middlewares.token_usage import TokenUsageMiddleware
from vocabulary.messages import message_text
from vocabulary.state import ThreadState
from vocabulary.text import ELLIPSIS, one_line
from workflows.run.io import RunStatus, RunView


class RunQueries:
    """The run's read side: queries and the settled-wait update, answered from the run's fields."""

    _ctx: TemporalRunContext
    _status: RunStatus
    _pending: dict[str, Any] | None
    _final_message: str | None
    _chain: list[Middleware]
    _state: ThreadState

    @workflow.query(name="status", description="The run: status, stop reason, turns, pending question.")
    def status(self) -> RunView:
        return self._view()

    @workflow.query(name="pending_input", description="The pending human_input_request payload, or null.")
    def pending_input(self) -> dict[str, Any] | None:
        return self._pending

    @workflow.query(name="chain", description="The middleware chain of this run, outermost first.")
    def chain(self) -> list[str]:
        return describe(self._chain)

    @workflow.query(
        name="events",
        description="Progress events (turns, tools, retries, pauses) from the given seq on, since the last "
        "continue-as-new; the workflow stream's topic 'progress' has the whole run.",
    )
    def events(self, offset: int = 0) -> list[dict[str, Any]]:
        return [event.as_dict() for event in self._ctx.events if event.seq >= offset]

    @workflow.query(
        name="state",
        description="The thread state in brief: one line per message, title, todos, artifacts, sandbox, uploads.",
    )
    def state(self) -> dict[str, Any]:
        return _state_brief(self._state)

    @workflow.update(
        name="wait_settled",
        description="Returns once the run is waiting for input or has ended.",
        # A waiter is abandoned on continue-as-new; the client asks the continued run again.
        unfinished_policy=HandlerUnfinishedPolicy.ABANDON,
    )
    async def wait_settled(self) -> RunView:
        await workflow.wait_condition(lambda: self._status != "running")
        return self._view()

    def _view(self) -> RunView:
        ctx = self._ctx
        return RunView(
            thread_id=ctx.thread_id,
            run_id=ctx.run_id,
            workflow_id=ctx.workflow_id,
            status=self._status,
            stop_reason=ctx.stop_reason,
            final_message=self._final_message,
            pending_input=self._pending,
            turns=ctx.turn,
            model=ctx.model,
            usage=next((mw.usage() for mw in self._chain if isinstance(mw, TokenUsageMiddleware)), None),
            chain=describe(self._chain),
        )

    def _final_view(self, status: RunStatus, failure: BaseException | None) -> dict[str, Any]:
        view = asdict(self._view())
        view["status"] = status
        view["pending_input"] = None  # a closed run waits for nothing (a cancelled pause leaves its request)
        if status == "error" and failure is not None and view["final_message"] is None:
            cause: BaseException = failure
            while isinstance(getattr(cause, "cause", None), BaseException):
                cause = cause.cause  # type: ignore[attr-defined]
            view["final_message"] = f"run failed: {cause}"
        return view


def _state_brief(state: ThreadState) -> dict[str, Any]:
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
