"""Subagent delegation: the ``task`` tool runs a subagent as a child workflow (``HartflowSubagent``) of the run.

The tool turn (``workflows/run/tools.py``) hands ``task`` calls here. The child is visible under its run in the Web
UI, cancelled with it (its cancellation reaches the child; so does closing the run), and timed out after
``run.subagents.timeout_seconds``. Its answer, failure or timeout comes back as the task result; while it runs,
its description shows in the run's current details (``RunFields.running_subagents``).
"""

from __future__ import annotations

from datetime import timedelta

from langchain_core.messages import ToolMessage
from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError

from middlewares.base import ToolCallRequest
from middlewares.context import RunContext
from middlewares.run_settings import RunSettings
from middlewares.sandbox_lease import SandboxLease
from vocabulary.delegation import SUBAGENT_STATUS_KEY, task_result_message
from workflows.run.delegation import (
    SUBAGENT_WORKFLOW_NAME,
    SubagentTask,
    UnknownSubagentTypeError,
    child_workflow_id,
    finished_child_message,
    interrupted_child_message,
    subagent_task,
    task_outcome,
)
from workflows.run.fields import RunFields
from workflows.run.io import RunInput, RunView
from workflows.run.visibility import Visibility


class Delegation:
    """Answers ``task`` calls by running subagents with the lead run's ``settings``."""

    def __init__(self, ctx: RunContext, fields: RunFields, visibility: Visibility, settings: RunSettings) -> None:
        self._ctx = ctx
        self._fields = fields
        self._visibility = visibility
        self._settings = settings

    async def delegate(self, request: ToolCallRequest) -> ToolMessage:
        """The ``task`` tool: start the subagent, wait for it, and report it started and finished."""
        ctx = self._ctx
        lease = request.sandbox or SandboxLease()  # a chain without Sandbox keeps no lease
        sandbox_id = lease.for_call(request.state)
        lease.starting(sandbox_id)  # the child may acquire the thread's sandbox; it never reports the id
        try:
            task, prompt, max_turns = subagent_task(
                request.tool_call,
                self._settings.subagents,
                parent_workflow_id=ctx.workflow_id,
                sandbox_id=sandbox_id,
                lead_tools=self._settings.tools,
                configured=self._fields.configured_tools or (),
            )
        except UnknownSubagentTypeError as exc:
            return task_result_message(request.call_id, "failed", error=str(exc), message_id=ctx.uuid())
        child_id = child_workflow_id(ctx.workflow_id, request.call_id)
        self._fields.running_subagents[child_id] = task.description
        self._visibility.update_details()
        model = self._settings.subagents.model or ctx.model
        ctx.emit(
            "subagent_started",
            type="task_started",
            task_id=request.call_id,
            call_id=request.call_id,
            workflow_id=child_id,
            description=task.description,
            model_name=model,
        )
        try:
            result = await self._run_subagent(request, task, prompt, max_turns, child_id)
        finally:
            self._fields.running_subagents.pop(child_id, None)
            self._visibility.update_details()
        status = result.additional_kwargs.get(SUBAGENT_STATUS_KEY)
        ctx.emit(
            "subagent_finished",
            type=f"task_{status}",
            task_id=request.call_id,
            call_id=request.call_id,
            workflow_id=child_id,
            description=task.description,
            status=status,
            **task_outcome(result),
        )
        return result

    async def _run_subagent(
        self, request: ToolCallRequest, task: SubagentTask, prompt: str, max_turns: int, child_id: str
    ) -> ToolMessage:
        """The child workflow, run to its end: its view, or its interruption, as the task result."""
        ctx = self._ctx
        subagents = self._settings.subagents
        model = subagents.model or ctx.model
        limits = {"recursion_limit": max_turns, "subagent_enabled": False, "non_interactive": True}
        settings = self._settings.model_copy(update=limits if task.tools is None else {**limits, "tools": task.tools})
        try:
            view = await workflow.execute_child_workflow(
                SUBAGENT_WORKFLOW_NAME,
                RunInput(
                    thread_id=ctx.thread_id,
                    message=prompt,
                    model=model,
                    user_id=ctx.user_id,
                    settings=settings,
                    subagent=task,
                ),
                id=child_id,
                result_type=RunView,
                parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
                execution_timeout=timedelta(seconds=subagents.timeout_seconds),
                static_summary=f"subagent {task.subagent_type} · {task.description}",
            )
        except ChildWorkflowError as exc:
            interrupted = interrupted_child_message(
                request.call_id, exc, message_id=ctx.uuid(), timeout_seconds=subagents.timeout_seconds
            )
            # A cancelled lead run cancels its children too: that must stay a cancellation, not a result.
            if interrupted is None or workflow.cancellation_reason() is not None:
                raise
            return interrupted
        return finished_child_message(
            request.call_id,
            message_id=ctx.uuid(),
            status=view.status,
            final_message=view.final_message,
            stop_reason=view.stop_reason,
            model_name=model,
            usage=view.usage,
        )
