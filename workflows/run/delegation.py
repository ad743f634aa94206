"""Delegation in the engine: how the run workflow starts a subagent and reads the child workflow's end.

* :class:`SubagentTask` — what a subagent run (``workflows/run/subagent.py``) is told about its delegation;
* :func:`subagent_task` / :func:`child_workflow_id` — the child run a ``task`` call starts, with the lead's tools
  its type may use (DeerFlow's subagents inherit the lead's tools, the configured ones too);
* :func:`finished_child_message` / :func:`interrupted_child_message` — the child's end as the task result of
  DeerFlow's status contract (``vocabulary/delegation.py``), and :func:`task_outcome` — that result as DeerFlow's
  ``task_*`` events carry it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from temporalio.exceptions import CancelledError, ChildWorkflowError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

from vocabulary.contracts.configured_tools import ConfiguredToolInfo
from vocabulary.delegation import (
    RUN_STOP_REASONS,
    SUBAGENT_ERROR_KEY,
    SUBAGENT_MODEL_NAME_KEY,
    SUBAGENT_RESULT_BRIEF_KEY,
    SUBAGENT_TOKEN_USAGE_KEY,
    SubagentsSettings,
    task_result_message,
)
from vocabulary.tools import BUILTIN_TOOLS

SUBAGENT_WORKFLOW_NAME = "HartflowSubagent"
SANDBOX_TOOL_NAMES = frozenset(tool.name for tool in BUILTIN_TOOLS if tool.sandbox)


@dataclass
class SubagentTask:
    """What a subagent run knows about its delegation (part of its input, so it survives continue-as-new)."""

    tool_call_id: str
    description: str
    subagent_type: str
    parent_workflow_id: str
    sandbox_id: str | None = None
    """The lead run's sandbox: the subagent works on the same files, and the lead releases it."""
    configured_tools: list[ConfiguredToolInfo] = field(default_factory=list)
    """The lead run's configured tools (``tools:``) this subagent may use, as the lead discovered them."""
    tools: list[str] | None = None
    """The lead's tools this subagent's type allows (its ``tools`` setting); ``None``: all of them."""


class UnknownSubagentTypeError(ValueError):
    pass


def subagent_task(
    call: Mapping[str, Any],
    settings: SubagentsSettings,
    *,
    parent_workflow_id: str,
    sandbox_id: str | None,
    lead_tools: list[str] | None = None,
    configured: Sequence[ConfiguredToolInfo] = (),
) -> tuple[SubagentTask, str, int]:
    """The task a ``task`` call describes, its prompt and its turn budget. Raises UnknownSubagentTypeError.
    ``lead_tools``: the lead's ``tools`` setting (``None``: every sandbox tool); ``configured``: the configured
    tools the lead has."""
    args = call.get("args")
    if not isinstance(args, dict):
        args = {}
    subagent_type = str(args.get("subagent_type") or "general-purpose")
    kind = settings.types.get(subagent_type)
    if kind is None:
        available = ", ".join(sorted(settings.types))
        raise UnknownSubagentTypeError(f"Unknown subagent type {subagent_type!r}. Available: {available}")
    requested = args.get("max_turns")
    max_turns = kind.max_turns
    if isinstance(requested, int) and not isinstance(requested, bool) and requested >= 1:
        max_turns = min(max_turns, requested)
    allowed = kind.tools
    task = SubagentTask(
        tool_call_id=str(call.get("id") or ""),
        description=str(args.get("description") or "").strip() or subagent_type,
        subagent_type=subagent_type,
        parent_workflow_id=parent_workflow_id,
        sandbox_id=sandbox_id,
        configured_tools=[tool for tool in configured if allowed is None or tool.name in allowed],
        tools=None
        if allowed is None
        else [name for name in lead_tools or sorted(SANDBOX_TOOL_NAMES) if name in allowed],
    )
    return task, str(args.get("prompt") or ""), max_turns


def child_workflow_id(parent_workflow_id: str, tool_call_id: str) -> str:
    """``{parent}-task-{tool_call_id}``, with characters a workflow id should not carry replaced."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", tool_call_id) or "call"
    return f"{parent_workflow_id}-task-{safe}"


def finished_child_message(
    tool_call_id: str,
    *,
    message_id: str,
    status: str,
    final_message: str | None,
    stop_reason: str | None,
    model_name: str | None,
    usage: Mapping[str, object] | None,
) -> ToolMessage:
    """The task result for a subagent run that ended by itself: its answer (``completed``; capped when a limit
    ended it), or ``failed`` when it ended in error or without an answer."""
    capped = RUN_STOP_REASONS.get(stop_reason or "")
    common: dict[str, Any] = {"message_id": message_id, "model_name": model_name, "token_usage": usage}
    if status == "completed" and final_message and final_message.strip():
        return task_result_message(tool_call_id, "completed", result=final_message, stop_reason=capped, **common)
    if status == "completed":
        error = "The subagent ended without a final answer."
    else:
        error = final_message or f"The subagent run ended with status {status}."
    return task_result_message(tool_call_id, "failed", error=error, stop_reason=capped, **common)


def interrupted_child_message(
    tool_call_id: str, exc: ChildWorkflowError, *, message_id: str, timeout_seconds: float
) -> ToolMessage | None:
    """The task result for a subagent that timed out or was cancelled on its own (not with the lead run), or
    None for any other failure, which ToolErrorHandling turns into the ``failed`` result."""
    if isinstance(exc.cause, TemporalTimeoutError):
        error = f"The subagent did not finish within {timeout_seconds:g} seconds."
        return task_result_message(tool_call_id, "timed_out", error=error, message_id=message_id)
    if isinstance(exc.cause, CancelledError):
        return task_result_message(tool_call_id, "cancelled", message_id=message_id)
    return None


def task_outcome(result: ToolMessage) -> dict[str, Any]:
    """What DeerFlow's ``task_completed`` / ``task_failed`` / ... events carry beside the task id, read from the
    task result's status contract: ``model_name``, ``usage``, and the (brief) ``result`` or the ``error``."""
    kwargs = result.additional_kwargs
    outcome = {"model_name": kwargs.get(SUBAGENT_MODEL_NAME_KEY), "usage": kwargs.get(SUBAGENT_TOKEN_USAGE_KEY)}
    if SUBAGENT_RESULT_BRIEF_KEY in kwargs:
        outcome["result"] = kwargs[SUBAGENT_RESULT_BRIEF_KEY]
    if SUBAGENT_ERROR_KEY in kwargs:
        outcome["error"] = kwargs[SUBAGENT_ERROR_KEY]
    return outcome


def usage_of(messages: Sequence[BaseMessage]) -> dict[str, int]:
    """The token totals of the AIMessages in ``messages`` (a subagent has no TokenUsage middleware)."""
    totals = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    for message in messages:
        usage = message.usage_metadata if isinstance(message, AIMessage) else None
        if usage:
            totals["input_tokens"] += usage["input_tokens"]
            totals["output_tokens"] += usage["output_tokens"]
            totals["total_tokens"] += usage["total_tokens"]
    return totals
