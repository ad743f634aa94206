"""ToolErrorHandling: a failing tool becomes an error result the model can act on, never a failed run.

Hook
* ``wrap_tool_call`` (innermost of the runtime base, right around the tool):
  - failure — the tool activity failed after its retry policy (an ``ActivityError`` whose cause is the
    activity's ``ApplicationError``; its ``type`` is the original exception class), or an inner hook raised:
    returns ``ToolMessage("Error: Tool '{name}' failed with {ExcClass}: {detail}. Continue with available
    context, or choose an alternative tool.", status="error")``, the detail cut to 500 characters (497 +
    ``...``), stamped with ``deerflow_tool_meta`` (``source: exception``). A failed ``task`` (its subagent
    child workflow failed, or could not start) answers in DeerFlow's subagent status contract instead:
    ``Task failed. Error: {ExcClass}: {detail}`` plus the same recovery hint, and ``additional_kwargs`` from
    ``make_subagent_additional_kwargs("failed", …)``. Cancellation is re-raised, never
    turned into a result: a cancelled run must stop and compensate.
  - success — stamps ``deerflow_tool_meta`` with the keyword rules (``middlewares/_tool_meta.py``), keeping
    a stamp the tool made itself; in a Command (the clarification pause among them) only the ToolMessage
    answering this call is stamped and the interrupt passes through untouched. A successful read (one of the
    summarization config's ``skill_file_read_tool_names``) of a ``SKILL.md`` under ``skills_container_path``
    also gets DeerFlow's ``skill_context_entry`` stamp, which DurableContext turns into ``skill_context``
    (``middlewares/_skill_context.py``).

Writes: the tool result (thread state, through the run); a log line per failure.

Parts: the subagent status contract in ``vocabulary/delegation.py`` (a failed ``task``, whose child
``workflows/run/delegate.py`` starts); the stamps ``middlewares/_tool_meta.py``. Tests:
``tests/test_tool_error_handling.py``.
"""

from __future__ import annotations

from collections.abc import Collection

from langchain_core.messages import ToolMessage
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError, is_cancelled_exception

from middlewares._logging import hook_logger
from middlewares._skill_context import stamp_skill_read
from middlewares._tool_meta import normalize_tool_result, stamp_exception_meta
from middlewares.base import Middleware, ToolCallRequest, ToolHandler, ToolResult
from vocabulary.delegation import TASK_TOOL_NAME, format_subagent_result_message, make_subagent_additional_kwargs
from vocabulary.text import clip

logger = hook_logger(__name__)

MAX_DETAIL_CHARS = 500
RECOVERY_HINT = "Continue with available context, or choose an alternative tool."


class ToolErrorHandlingMiddleware(Middleware):
    def __init__(
        self,
        *,
        skills_root: str = "/mnt/skills",
        skill_read_tool_names: Collection[str] = ("read_file", "read", "view", "cat"),
    ) -> None:
        self._skills_root = skills_root
        self._skill_read_tool_names = frozenset(skill_read_tool_names)

    async def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolResult:
        try:
            result = await handler(request)
        except Exception as exc:
            if is_cancelled_exception(exc):
                raise
            message = error_message(request, exc)
            logger.warning("Tool execution failed: name=%s id=%s: %s", request.name, request.call_id, message.content)
            return message
        if isinstance(result, ToolMessage) and request.name in self._skill_read_tool_names:
            result = stamp_skill_read(result, request.tool_call, skills_root=self._skills_root)
        return normalize_tool_result(result, tool_call_id=request.call_id)


def failure_of(exc: Exception) -> tuple[str, str]:
    """(exception class name, message) of the failure as the tool raised it.

    Temporal carries an activity's (or a child workflow's) exception as the ``ApplicationError`` cause of an
    ``ActivityError`` (``ChildWorkflowError``), with the original class name in ``type``; timeouts arrive as a
    ``TimeoutError`` cause.
    """
    cause: BaseException = exc
    if isinstance(exc, ActivityError | ChildWorkflowError) and exc.cause is not None:
        cause = exc.cause
    if isinstance(cause, ApplicationError) and cause.type:
        return cause.type, cause.message
    return type(cause).__name__, str(cause)


def error_message(request: ToolCallRequest, exc: Exception) -> ToolMessage:
    name = request.name or "unknown_tool"
    exc_class, text = failure_of(exc)
    detail = text.strip() or exc_class
    detail = clip(detail, MAX_DETAIL_CHARS)
    if name == TASK_TOOL_NAME:
        text, error = format_subagent_result_message("failed", error=f"{exc_class}: {detail}")
        task_failure = ToolMessage(
            f"{text.rstrip('.')}. {RECOVERY_HINT}",
            tool_call_id=request.call_id or "missing_tool_call_id",
            name=name,
            status="error",
            additional_kwargs=make_subagent_additional_kwargs("failed", error=error),
        )
        return stamp_exception_meta(task_failure, f"{exc_class}: {detail}")
    message = ToolMessage(
        f"Error: Tool '{name}' failed with {exc_class}: {detail}. {RECOVERY_HINT}",
        tool_call_id=request.call_id or "missing_tool_call_id",
        name=name,
        status="error",
    )
    return stamp_exception_meta(message, f"{exc_class}: {detail}")
