"""A subagent's steps, reported live to its lead run: DeerFlow's ``task_running`` events.

DeerFlow's subtask card shows what a subagent does while it works: each assistant turn (its text and tool-call
requests) and each tool result arrives as a ``task_running`` custom event (``bytedance/deer-flow:
frontend/src/core/tasks/steps.ts``, ``messageToStep``). A subagent here is a child workflow
(``workflows/run/delegate.py``), so the child sends each new AI or tool message of its state to the lead run as
the ``subagent_step`` signal (:class:`SubagentStep`), right after the step; the lead records it as its progress
event ``subagent_step`` (``type`` ``task_running``), which the API streams as a ``custom`` event and the run's
archive keeps for ``GET …/runs/{run}/events`` (``workers/api/run_events.py``).

A step's message is compact, as DeerFlow persists its steps (``bytedance/deer-flow:
backend/packages/harness/deerflow/subagents/step_events.py``): text capped at :data:`STEP_TEXT_MAX_CHARS`
(``truncated``), tool-call arguments longer than that sent as a cut JSON string (``args_truncated``). Child runs
whose history predates the report replay without it (``hartflow-subagent-steps`` patch).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from temporalio import workflow
from temporalio.exceptions import FailureError

from middlewares import patches
from middlewares.context import RunContext
from vocabulary.messages import message_text
from vocabulary.state import ThreadState
from workflows.run.delegation import SubagentTask, usage_of

SUBAGENT_STEP_SIGNAL = "subagent_step"
STEP_TEXT_MAX_CHARS = 8192
"""DeerFlow's ``SUBAGENT_STEP_MAX_CHARS``: a step's text and each call's arguments, at most."""


@dataclass
class SubagentStep:
    """One step of a subagent, as its lead run receives it (the ``subagent_step`` signal)."""

    task_id: str
    """The lead's ``task`` tool call id (DeerFlow's ``task_id``)."""
    message_index: int
    """The step's number in the subagent's steps, from 1 (DeerFlow's): a client dedups by it."""
    message: dict[str, Any]
    truncated: bool = False
    model_name: str | None = None
    usage: dict[str, int] | None = None
    """The subagent's token totals so far."""


def step_message(message: BaseMessage) -> tuple[dict[str, Any], bool]:
    """The message as a step carries it (LangChain's dict shape, only what a step shows), and whether its text
    was cut."""
    text = message_text(message)
    truncated = len(text) > STEP_TEXT_MAX_CHARS
    shown: dict[str, Any] = {"type": message.type, "id": message.id, "content": text[:STEP_TEXT_MAX_CHARS]}
    if isinstance(message, ToolMessage):
        shown.update(name=message.name, tool_call_id=message.tool_call_id, status=message.status)
    elif isinstance(message, AIMessage):
        shown["tool_calls"] = [_bounded_call(dict(call)) for call in message.tool_calls]
    return shown, truncated


def _bounded_call(call: dict[str, Any]) -> dict[str, Any]:
    shown = {"name": call.get("name"), "args": call.get("args"), "id": call.get("id")}
    serialized = json.dumps(shown["args"], ensure_ascii=False, default=str)
    if len(serialized) <= STEP_TEXT_MAX_CHARS:
        return shown
    return {**shown, "args": serialized[:STEP_TEXT_MAX_CHARS], "args_truncated": True}


class StepReports:
    """The child's side: sends the steps its state gained since the last report (nothing for a lead run)."""

    def __init__(
        self, ctx: RunContext, task: SubagentTask | None, model_name: str, *, carried: Sequence[BaseMessage] = ()
    ) -> None:
        self._ctx = ctx
        self._task = task
        self._model_name = model_name
        self._seen = {message.id for message in carried}
        """Ids of the messages reported (a continued run's carried messages were, by the execution before)."""
        self._steps = sum(isinstance(message, AIMessage | ToolMessage) for message in carried)

    async def report(self, state: ThreadState) -> None:
        parent = workflow.info().parent
        if self._task is None or parent is None:
            return
        new = [m for m in state.messages if isinstance(m, AIMessage | ToolMessage) and m.id not in self._seen]
        self._seen.update(message.id for message in new)
        if not new or not self._ctx.patched(patches.SUBAGENT_STEPS):
            return
        lead = workflow.get_external_workflow_handle(parent.workflow_id, run_id=parent.run_id)
        usage = usage_of(state.messages)
        for message in new:
            self._steps += 1
            shown, truncated = step_message(message)
            step = SubagentStep(self._task.tool_call_id, self._steps, shown, truncated, self._model_name, usage)
            try:
                await lead.signal(SUBAGENT_STEP_SIGNAL, step)
            except FailureError as exc:
                # The lead is gone (cancelled, ended): nobody to show the step to, and the subagent ends with it.
                workflow.logger.info("subagent step %s not reported: %s", self._steps, exc)
                return


def record_step(ctx: RunContext, step: SubagentStep) -> None:
    """The lead's side: the step as its progress event, in DeerFlow's ``task_running`` shape."""
    ctx.emit(
        "subagent_step",
        type="task_running",
        task_id=step.task_id,
        message=step.message,
        message_index=step.message_index,
        truncated=step.truncated,
        usage=step.usage,
        model_name=step.model_name,
    )
