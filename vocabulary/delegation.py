"""Delegation's vocabulary: the ``task`` tool, its settings, DeerFlow's result contract and the delegation ledger.

Pure data and functions, read by the engine (``workflows/run/delegation.py``, the run workflow) and by middlewares
(SubagentLimit, ToolErrorHandling) alike:

* :class:`SubagentsSettings` — ``run.subagents`` (DeerFlow's ``subagents`` config plus the runtime limits
  ``max_concurrent_subagents`` / ``max_total_subagents``, clamped as DeerFlow clamps them);
* :data:`TASK_TOOL` — the ``task`` tool the lead model sees when ``run.subagent_enabled`` is on;
* DeerFlow's subagent status contract (``bytedance/deer-flow:
  backend/packages/harness/deerflow/subagents/status_contract.py``): the model-visible result text
  (:func:`format_subagent_result_message`), the structured ``additional_kwargs``
  (:func:`make_subagent_additional_kwargs`), which UIs and TokenUsage read — strings and keys are a protocol —
  and the ToolMessage carrying both (:func:`task_result_message`);
* the ``delegations`` ledger that SubagentLimit counts is captured by ``vocabulary/delegation_ledger.py``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Literal

from langchain_core.messages import ToolMessage
from pydantic import BaseModel, ConfigDict, Field, field_validator

from vocabulary.text import head_and_tail
from vocabulary.tools import ToolSpec

TASK_TOOL_NAME = "task"

# DeerFlow's clamps (``bytedance/deer-flow: backend/packages/harness/deerflow/config/subagents_config.py``):
# a model asking for more is cut back, not refused.
MAX_CONCURRENT_RANGE = (1, 4)
MAX_TOTAL_RANGE = (1, 50)


class SubagentTypeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(ge=1, description="model calls a subagent of this type may make (its recursion limit)")
    tools: list[str] | None = Field(
        None,
        description="the lead run's tools (sandbox and configured) this type may use, DeerFlow's tools allowlist; "
        "null: all of them (task, ask_clarification and present_files never)",
    )


BASH_AGENT_TOOLS = ["bash", "ls", "read_file", "write_file", "str_replace"]
"""DeerFlow's bash agent: sandbox tools only."""


def _default_types() -> dict[str, SubagentTypeSettings]:
    # DeerFlow's built-ins (``bytedance/deer-flow: backend/packages/harness/deerflow/subagents/builtins/``).
    return {
        "general-purpose": SubagentTypeSettings(max_turns=150),
        "bash": SubagentTypeSettings(max_turns=60, tools=BASH_AGENT_TOOLS),
    }


class SubagentsSettings(BaseModel):
    """``run.subagents``: limits and types of the subagents the ``task`` tool starts."""

    model_config = ConfigDict(extra="forbid")

    max_concurrent: int = Field(3, description="task calls one model response may start; clamped to 1–4")
    max_total: int = Field(6, description="task calls one run may start; clamped to 1–50")
    timeout_seconds: float = Field(1800, gt=0, description="a subagent still running after this is timed out")
    model: str | None = Field(None, description="model spec of subagents; default: the lead run's model")
    types: dict[str, SubagentTypeSettings] = Field(default_factory=_default_types, min_length=1)

    @field_validator("max_concurrent")
    @classmethod
    def _clamp_concurrent(cls, value: int) -> int:
        return clamp(value, MAX_CONCURRENT_RANGE)

    @field_validator("max_total")
    @classmethod
    def _clamp_total(cls, value: int) -> int:
        return clamp(value, MAX_TOTAL_RANGE)


def clamp(value: int, bounds: tuple[int, int]) -> int:
    low, high = bounds
    return max(low, min(high, value))


TASK_TOOL = ToolSpec(
    TASK_TOOL_NAME,
    "Delegate a self-contained task to a subagent that works on its own (with the sandbox tools) and reports "
    "back once. Independent tasks issued in the same response run in parallel (a few at a time). Give the "
    "subagent everything it needs in the prompt: it does not see this conversation.",
    {
        "type": "object",
        "properties": {
            "description": {"type": "string", "description": "A short (3-5 word) description of the task."},
            "prompt": {"type": "string", "description": "The complete task for the subagent."},
            "subagent_type": {
                "type": "string",
                "description": "Which subagent: general-purpose (default) or bash (command-line work).",
            },
            "max_turns": {"type": "integer", "description": "Fewer model calls than the subagent type allows."},
        },
        "required": ["description", "prompt", "subagent_type"],
    },
)


# -- DeerFlow's subagent status contract -------------------------------------------------------------------

SubagentStatus = Literal["completed", "failed", "cancelled", "timed_out", "polling_timed_out"]
SubagentStopReason = Literal["token_capped", "turn_capped", "loop_capped"]

SUBAGENT_STATUS_KEY = "subagent_status"
SUBAGENT_STOP_REASON_KEY = "subagent_stop_reason"
SUBAGENT_ERROR_KEY = "subagent_error"
SUBAGENT_RESULT_BRIEF_KEY = "subagent_result_brief"
SUBAGENT_RESULT_SHA256_KEY = "subagent_result_sha256"
SUBAGENT_MODEL_NAME_KEY = "subagent_model_name"
SUBAGENT_TOKEN_USAGE_KEY = "subagent_token_usage"
SUBAGENT_METADATA_TEXT_MAX_CHARS = 2000

_STOP_REASON_LABELS: dict[str, str] = {
    "token_capped": "token budget",
    "turn_capped": "turn budget",
    "loop_capped": "repeated tool-call loop",
}

# What ended a hartflow subagent run (its ``stop_reason``) in the contract's terms.
RUN_STOP_REASONS: dict[str, SubagentStopReason] = {
    "recursion_limit": "turn_capped",
    "loop_capped": "loop_capped",
    "token_capped": "token_capped",
}


def normalize_token_usage(value: Any) -> dict[str, int] | None:
    """``{input_tokens, output_tokens, total_tokens}`` as non-negative ints, or None for anything else."""
    if not isinstance(value, Mapping):
        return None
    usage: dict[str, int] = {}
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        amount = value.get(key)
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
            return None
        usage[key] = amount
    return usage


def make_subagent_additional_kwargs(
    status: SubagentStatus,
    *,
    result: str | None = None,
    error: str | None = None,
    stop_reason: SubagentStopReason | None = None,
    model_name: str | None = None,
    token_usage: Mapping[str, object] | None = None,
) -> dict[str, object]:
    payload: dict[str, object] = {SUBAGENT_STATUS_KEY: status}
    if status == "completed" and isinstance(result, str) and result.strip():
        payload[SUBAGENT_RESULT_BRIEF_KEY] = head_and_tail(result.strip(), SUBAGENT_METADATA_TEXT_MAX_CHARS)
        payload[SUBAGENT_RESULT_SHA256_KEY] = hashlib.sha256(result.encode("utf-8")).hexdigest()
    if status != "completed" and isinstance(error, str) and error.strip():
        payload[SUBAGENT_ERROR_KEY] = head_and_tail(error.strip(), SUBAGENT_METADATA_TEXT_MAX_CHARS)
    if stop_reason is not None:
        payload[SUBAGENT_STOP_REASON_KEY] = stop_reason
    if isinstance(model_name, str) and model_name.strip():
        payload[SUBAGENT_MODEL_NAME_KEY] = model_name.strip()
    usage = normalize_token_usage(token_usage)
    if usage is not None:
        payload[SUBAGENT_TOKEN_USAGE_KEY] = usage
    return payload


def format_subagent_result_message(
    status: SubagentStatus,
    *,
    result: str | None = None,
    error: str | None = None,
    stop_reason: SubagentStopReason | None = None,
) -> tuple[str, str | None]:
    """The model-visible task result and the normalized error (None when completed)."""
    result_text = "" if result is None else str(result)
    error_text = error.strip() if isinstance(error, str) else ""
    capped = _STOP_REASON_LABELS.get(stop_reason) if stop_reason is not None else None
    if status == "completed":
        if capped:
            return f"Task Succeeded (capped: {capped}). Result: {result_text}", None
        return f"Task Succeeded. Result: {result_text}", None
    if status == "cancelled":
        detail = error_text or "Task cancelled by user."
        if detail == "Task cancelled by user.":
            return detail, detail
        return f"Task cancelled by user. Error: {detail}", detail
    if status == "timed_out":
        detail = error_text or "Task timed out."
        if detail == "Task timed out.":
            return detail, detail
        return f"Task timed out. Error: {detail}", detail
    if status == "polling_timed_out":
        detail = error_text or "Task polling timed out."
        return detail, detail
    detail = error_text or "Task failed."
    if capped:
        if detail == "Task failed.":
            return f"Task failed (capped: {capped}).", detail
        return f"Task failed (capped: {capped}). Error: {detail}", detail
    if detail == "Task failed.":
        return detail, detail
    return f"Task failed. Error: {detail}", detail


def task_result_message(
    tool_call_id: str,
    status: SubagentStatus,
    *,
    message_id: str,
    result: str | None = None,
    error: str | None = None,
    stop_reason: SubagentStopReason | None = None,
    model_name: str | None = None,
    token_usage: Mapping[str, object] | None = None,
) -> ToolMessage:
    """The ToolMessage answering a ``task`` call: the contract's text and ``additional_kwargs``."""
    content, normalized_error = format_subagent_result_message(
        status, result=result, error=error, stop_reason=stop_reason
    )
    return ToolMessage(
        content,
        tool_call_id=tool_call_id,
        name=TASK_TOOL_NAME,
        status="success" if status == "completed" else "error",
        id=message_id,
        additional_kwargs=make_subagent_additional_kwargs(
            status,
            result=result,
            error=normalized_error,
            stop_reason=stop_reason,
            model_name=model_name,
            token_usage=token_usage,
        ),
    )
