"""ToolOutputBudget: one oversized tool result must never blow the model's context.

Hooks
* ``wrap_tool_call`` (outermost of the base chain, so it sees the final result): a text result longer than
  the tool's threshold (``externalize_min_chars``, per-tool ``tool_overrides``; 0 disables) is saved to
  ``/mnt/user-data/outputs/.tool-results/{tool}-{id}.{ext}`` by the ``tool_output.externalize`` activity, which
  writes through the sandbox provider so the model's ``read_file`` can read it back wherever the sandbox runs.
  The ToolMessage keeps a typed preview instead (``_tool_output_synopsis.py``). When saving fails, results
  longer than ``fallback_max_chars`` are cut to head + tail with DeerFlow's "Persistent storage unavailable"
  marker, never exceeding ``fallback_max_chars``. ``read_file`` is exempt (a saved output must stay readable
  without being saved again); ToolMessages inside a ``Command`` update are budgeted too.
* ``wrap_model_call``: historical ToolMessages still over budget (written before budgeting was on, or by an
  exempt path) are cut with the fallback truncation in the model request only.

Writes: the ToolMessage of the result (thread state), the request overlay, and the saved file (side effect).
Per-run memory: the messages checked last turn and their flags, so a turn checks only what was appended.

Parts: the contract ``vocabulary/contracts/tools.py`` (``TOOL_OUTPUT_EXTERNALIZE``) and its activity
``activities/tool_output.py``; ``VIRTUAL_OUTPUTS_DIR`` in ``vocabulary/paths.py``; the preview
``middlewares/_tool_output_synopsis.py`` over ``middlewares/_data_synopsis.py``. Tests:
``tests/test_tool_output_budget.py``, ``tests/test_data_synopsis.py``, ``tests/test_thread_files.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, field_validator
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from middlewares._activity_call import call_activity
from middlewares._tool_output_synopsis import render_tool_output_preview
from middlewares.base import Command, Middleware, ModelHandler, ModelRequest, ToolCallRequest, ToolHandler, ToolResult
from middlewares.context import ActivityOptions, best_effort
from vocabulary.contracts import TOOL_OUTPUT_EXTERNALIZE, ExternalizeInput
from vocabulary.messages import AppendedMessages
from vocabulary.paths import VIRTUAL_OUTPUTS_DIR

FALLBACK_MARKER = (
    "\n\n[... {omitted} chars omitted from {tool} output. Persistent storage unavailable. "
    "Consider narrowing the query or using more specific parameters.]\n\n"
)
_LOG_TOOLS = frozenset({"bash", "bash_tool", "web_fetch"})
_EXTERNALIZE_OPTIONS = ActivityOptions(
    start_to_close=timedelta(seconds=60),
    retry=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3),
)


class ToolOutputConfig(BaseModel):
    """``tool_output`` in DeerFlow's config, with its defaults."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    externalize_min_chars: NonNegativeInt = 12_000
    preview_head_chars: NonNegativeInt = 2_000
    preview_tail_chars: NonNegativeInt = 1_000
    fallback_max_chars: NonNegativeInt = 30_000
    fallback_head_chars: NonNegativeInt = 8_000
    fallback_tail_chars: NonNegativeInt = 3_000
    storage_subdir: str = ".tool-results"
    exempt_tools: list[str] = Field(default_factory=lambda: ["read_file", "read_file_tool"])
    tool_overrides: dict[str, NonNegativeInt] = Field(
        default_factory=dict, description="per-tool externalisation threshold; 0 disables it for that tool"
    )

    @field_validator("storage_subdir")
    @classmethod
    def _one_segment(cls, value: str) -> str:
        if value in ("", ".", "..") or any(c in value for c in "/\\\0"):
            raise ValueError("storage_subdir must be a single path segment such as '.tool-results'")
        return value


# -- pure budget logic ------------------------------------------------------------------------------------


def tool_text(content: Any) -> str | None:
    """The text of a tool result, or ``None`` when it is not plain text (images and other blocks are never
    budgeted)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    pieces = []
    for block in content:
        if isinstance(block, str):
            pieces.append(block)
        elif isinstance(block, dict) and isinstance(block.get("text"), str):
            pieces.append(block["text"])
        else:
            return None
    return "\n".join(pieces) if pieces else None


def externalize_threshold(tool: str, config: ToolOutputConfig) -> int:
    return config.tool_overrides.get(tool, config.externalize_min_chars)


def should_externalize(text: str, tool: str, config: ToolOutputConfig) -> bool:
    threshold = externalize_threshold(tool, config)
    return threshold > 0 and len(text) > threshold


def over_budget(message: BaseMessage, config: ToolOutputConfig) -> bool:
    """Whether ``message`` is a non-exempt tool result that either rule (externalise or cut) applies to."""
    if not isinstance(message, ToolMessage) or (message.name or "") in config.exempt_tools:
        return False
    text = tool_text(message.content)
    if text is None:
        return False
    limits = [n for n in (externalize_threshold(message.name or "", config), config.fallback_max_chars) if n > 0]
    return bool(limits) and len(text) > min(limits)


def budget_text(text: str, *, tool: str, config: ToolOutputConfig, saved_to: str | None) -> str | None:
    """What the model sees instead of ``text`` (``saved_to``: where it was saved, if it was); ``None``
    leaves it unchanged.

    A result at most as long as its threshold is untouched; a longer one becomes a preview of the saved
    file, or — only when it could not be saved and exceeds ``fallback_max_chars`` — a head + tail cut.
    """
    if saved_to is not None and should_externalize(text, tool, config):
        return render_tool_output_preview(
            text,
            tool_name=tool,
            virtual_path=saved_to,
            head_chars=config.preview_head_chars,
            tail_chars=config.preview_tail_chars,
        )
    if 0 < config.fallback_max_chars < len(text):
        return truncate_head_tail(
            text,
            tool=tool,
            max_chars=config.fallback_max_chars,
            head_chars=config.fallback_head_chars,
            tail_chars=config.fallback_tail_chars,
        )
    return None


def truncate_head_tail(text: str, *, tool: str, max_chars: int, head_chars: int, tail_chars: int) -> str:
    """Head + marker + tail, never longer than ``max_chars``; the cut points move to line breaks when one is
    near (the head ends after a newline, the tail starts after one)."""
    total = len(text)
    if max_chars <= 0 or total <= max_chars:
        return text
    # Sized with the total as the omitted count: the real count is smaller, so the result only gets shorter.
    overhead = len(FALLBACK_MARKER.format(omitted=total, tool=tool))
    if overhead >= max_chars:
        return text[:max_chars]
    room = max_chars - overhead
    head = min(head_chars, room)
    tail = min(tail_chars, room - head)
    head_end = snap_end_to_line(text, min(head, total))
    tail_start = snap_start_to_line(text, max(head_end, total - tail))
    kept_tail = text[tail_start:] if tail_start < total else ""
    marker = FALLBACK_MARKER.format(omitted=total - head_end - len(kept_tail), tool=tool)
    return text[:head_end] + marker + kept_tail


def snap_end_to_line(text: str, pos: int) -> int:
    """Move an end offset back to just after a newline in the second half of ``text[:pos]``, if any."""
    if pos <= 0 or pos >= len(text):
        return pos
    newline = text.rfind("\n", pos // 2, pos)
    return newline + 1 if newline >= 0 else pos


def snap_start_to_line(text: str, pos: int) -> int:
    """Move a start offset forward to just after a newline in the first half of ``text[pos:]``, if any.
    (Moving a start backwards would lengthen the slice.)"""
    if pos <= 0 or pos >= len(text):
        return pos
    newline = text.find("\n", pos, pos + (len(text) - pos) // 2)
    return newline + 1 if newline >= 0 else pos


def externalized_filename(tool: str, call_id: str, content: str) -> str:
    """``{tool}-{id}.{ext}``: the id hashes the call id and the content, so a retried activity or a replayed
    workflow writes the same file and two different outputs never share one."""
    safe = posixpath.basename(tool).replace("..", "").replace("\\", "_") or "unknown"
    call_bytes = call_id.encode("utf-8")
    digest = hashlib.sha256(len(call_bytes).to_bytes(8, "big") + call_bytes + content.encode("utf-8"))
    return f"{safe}-{digest.hexdigest()[:12]}.{'log' if tool in _LOG_TOOLS else 'txt'}"


# -- the middleware ---------------------------------------------------------------------------------------


class ToolOutputBudgetMiddleware(Middleware):
    def __init__(self, config: ToolOutputConfig | None = None) -> None:
        self.config = config or ToolOutputConfig()
        # Per-run memory: the messages checked last turn and their flags (see _over_budget).
        self._checked = AppendedMessages()
        self._flags: list[bool] = []

    async def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolResult:
        result = await handler(request)
        if not self.config.enabled:
            return result
        # Never acquire a sandbox just to save output: use the one this run's tools already have, if any (Sandbox,
        # inside this wrapper, writes a newly learnt id into the result; else the state names it).
        sandbox_id = _written_sandbox_id(result) or (request.state.sandbox or {}).get("sandbox_id")
        if isinstance(result, ToolMessage):
            return await self._budget(result, request, sandbox_id)
        messages = result.update.get("messages")
        if isinstance(messages, ToolMessage):
            patched = await self._budget(messages, request, sandbox_id)
            return result if patched is messages else _with_messages(result, patched)
        if not isinstance(messages, list | tuple):
            return result
        patched_list = [
            await self._budget(m, request, sandbox_id) if isinstance(m, ToolMessage) else m for m in messages
        ]
        if all(new is old for new, old in zip(patched_list, messages, strict=True)):
            return result
        return _with_messages(result, patched_list)

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AIMessage:
        if not self.config.enabled:
            return await handler(request)
        flags = self._over_budget(request.messages)
        if not any(flags):
            return await handler(request)
        messages = [self._cut(m) if over else m for m, over in zip(request.messages, flags, strict=True)]
        return await handler(request.override(messages=messages))

    def _over_budget(self, messages: Sequence[BaseMessage]) -> list[bool]:
        """:func:`over_budget` of each message. While the conversation only grows
        (:class:`vocabulary.messages.AppendedMessages`) only the new ones are checked: checking the whole conversation
        every turn made a turn's cost grow with it."""
        start = self._checked.start(messages)
        del self._flags[start:]
        self._flags.extend(over_budget(message, self.config) for message in messages[start:])
        return self._flags

    async def _budget(self, message: ToolMessage, request: ToolCallRequest, sandbox_id: Any) -> ToolMessage:
        if not over_budget(message, self.config):
            return message
        tool = message.name or "unknown"
        text = tool_text(message.content)
        assert text is not None  # over_budget checked it
        saved_to = None
        if should_externalize(text, tool, self.config):
            saved_to = await self._save(text, tool, message.tool_call_id, request, sandbox_id)
        replacement = budget_text(text, tool=tool, config=self.config, saved_to=saved_to)
        return message if replacement is None else message.model_copy(update={"content": replacement})

    async def _save(self, text: str, tool: str, call_id: str, request: ToolCallRequest, sandbox_id: Any) -> str | None:
        ctx = request.ctx
        path = f"{VIRTUAL_OUTPUTS_DIR}/{self.config.storage_subdir}/{externalized_filename(tool, call_id, text)}"
        result = await best_effort(
            call_activity(
                ctx,
                TOOL_OUTPUT_EXTERNALIZE,
                ExternalizeInput(ctx.thread, sandbox_id, path, text),
                summary=f"ToolOutputBudget.wrap_tool_call · save {tool} output",
                options=_EXTERNALIZE_OPTIONS,
            )
        )
        if isinstance(result, ActivityError):
            return None  # DeerFlow: every storage failure falls back to truncation
        return path if result.saved else None

    def _cut(self, message: BaseMessage) -> BaseMessage:
        """History path: no sandbox here, so only the fallback truncation applies."""
        text = tool_text(message.content)
        assert text is not None  # over_budget checked it
        replacement = budget_text(text, tool=message.name or "unknown", config=self.config, saved_to=None)
        return message if replacement is None else message.model_copy(update={"content": replacement})


def _written_sandbox_id(result: ToolResult) -> Any:
    """The sandbox id a tool result writes into thread state (``None`` when it writes none)."""
    if isinstance(result, ToolMessage):
        return None
    sandbox = result.update.get("sandbox")
    return sandbox.get("sandbox_id") if isinstance(sandbox, dict) else None


def _with_messages(command: Command, messages: Any) -> Command:
    return dataclasses.replace(command, update={**command.update, "messages": messages})
