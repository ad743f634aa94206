"""ToolProgress: a tool that keeps failing, or keeps returning the same thing, gets a hint and then is blocked
(DeerFlow's ``ToolProgressMiddleware``, RFC #3177; ``tool_progress.enabled``, off by default as in DeerFlow).

A per-tool state machine over the structured verdict ToolErrorHandling stamps on every result
(``deerflow_tool_meta``, ``middlewares/_tool_meta.py``), hence outside it (DeerFlow's one ordering constraint):

* a problem is an ``error`` or ``partial_success`` result, or a ``success`` whose word set (words of three or more
  characters in the first 8192 characters) has a Jaccard similarity of at least ``jaccard_similarity_threshold``
  with one of the tool's last three successful results (both at least ``min_word_count_for_similarity`` words);
  any other result resets the tool to ACTIVE;
* ``recoverable_by_model: false`` with ``recommended_next_action: stop`` (auth, config, internal) ⇒ BLOCKED at
  once; ``stagnation_threshold`` consecutive problems ⇒ WARNED with a hint; ``warn_escalation_count`` more ⇒
  BLOCKED when the model cannot fix it (transient, rate-limited), WARNED again with the hint when it can.

Hooks
* ``before_agent`` — every tool starts the run ACTIVE and no hint is pending (DeerFlow resets per run).
* ``wrap_tool_call`` — right after ReadBeforeWrite (a blocked write takes no slot here) and before ToolApproval
  (a blocked tool never bothers a reviewer); the exempt tools (``ask_clarification``, ``write_todos``,
  ``present_files``, ``task``) pass through. A BLOCKED tool does not run: ``[TOOL_BLOCKED] {reason}``
  (``status="error"``, ``deerflow_tool_meta`` ``blocked_by_progress_guard``). Otherwise the result moves the state
  and may queue DeerFlow's ``[PROGRESS HINT] …`` (at most three per run until drained).
* ``wrap_model_call`` — request overlay: the queued hints, deduplicated, as one
  ``HumanMessage(name="progress_hint")`` at the end, on the next model call only (drained).

Writes: the tool result (thread state) for blocked calls; the request overlay. Per-run memory: the tools' phases
and the pending hints, carried across continue-as-new.

Parts: the verdicts ``middlewares/_tool_meta.py``, stamped by ``middlewares/tool_error_handling.py`` (and by
``middlewares/read_before_write.py`` for the writes it blocks). Tests: ``tests/test_tool_progress.py``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from pydantic import BaseModel, ConfigDict, Field

from middlewares._logging import hook_logger
from middlewares._tool_meta import TOOL_META_KEY
from middlewares.base import Middleware, ModelHandler, ModelRequest, ToolCallRequest, ToolHandler, ToolResult
from middlewares.context import RunContext
from vocabulary.state import StateUpdate, ThreadState

logger = hook_logger(__name__)

MAX_PENDING_PER_RUN = 3
MAX_CONTENT_FOR_WORDSET = 8192
HINT_MESSAGE_NAME = "progress_hint"
_WORD = re.compile(r"\b\w{3,}\b")
_ACTIONS = {
    "rewrite_query": "Try rephrasing your search query with different keywords or approach.",
    "try_alternative": "Consider using a different tool or strategy.",
    "summarize": "Consider summarizing your current findings and moving forward.",
    "stop": "Do not retry this operation — it is not recoverable.",
    "continue": "Try rephrasing your query or using a different search term.",
}
_HINTS = {
    "no_results": "[PROGRESS HINT] Your search returned no results.",
    "not_found": "[PROGRESS HINT] The resource was not found repeatedly.",
    "rate_limited": "[PROGRESS HINT] The tool is being rate-limited.",
    "transient": "[PROGRESS HINT] The tool encountered repeated transient failures.",
    "partial_success": "[PROGRESS HINT] The tool has returned incomplete results multiple times.",
    "success": "[PROGRESS HINT] The tool is returning duplicate results.",
}
_BLOCK_REASONS = {
    "no_results": "Repeated no-results — rewrite your query or try a different tool.",
    "not_found": "Repeated not-found — rewrite your query or try a different resource.",
    "rate_limited": "Repeated rate-limiting — summarize current findings and proceed.",
    "transient": "Repeated transient failures — try a different approach.",
    "auth": "Authentication failure — this tool cannot be used.",
    "config": "Tool is not configured — this tool cannot be used.",
    "internal": "Repeated internal errors — this tool is unavailable.",
}


class ToolProgressConfig(BaseModel):
    """DeerFlow's ``tool_progress`` section."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    stagnation_threshold: int = Field(3, ge=1)
    warn_escalation_count: int = Field(2, ge=1)
    inject_assessment: bool = True
    jaccard_similarity_threshold: float = Field(0.8, ge=0.0, le=1.0)
    min_word_count_for_similarity: int = 10
    exempt_tools: list[str] = Field(
        default_factory=lambda: ["ask_clarification", "write_todos", "present_files", "task"]
    )


@dataclass(frozen=True)
class ToolPhase:
    phase: Literal["active", "warned", "blocked"] = "active"
    consecutive_problems: int = 0
    block_reason: str | None = None
    recent_word_sets: tuple[frozenset[str], ...] = ()


def word_set(content: str) -> frozenset[str]:
    return frozenset(_WORD.findall(content[:MAX_CONTENT_FOR_WORDSET].lower()))


def is_near_duplicate(
    current: frozenset[str], recent: Sequence[frozenset[str]], threshold: float, min_words: int
) -> bool:
    if len(current) < min_words:
        return False
    for previous in recent[-3:]:
        union = len(current | previous)
        if len(previous) >= min_words and union and len(current & previous) / union >= threshold:
            return True
    return False


def format_hint(meta: dict[str, Any]) -> str:
    base = _HINTS.get(
        meta.get("error_type") or meta.get("status") or "", "[PROGRESS HINT] The tool is not producing new information."
    )
    return f"{base} {_ACTIONS.get(meta.get('recommended_next_action') or '', '')}".strip()


def block_reason(meta: dict[str, Any]) -> str:
    fallback = "Tool has not produced new information after multiple attempts — summarize and move on."
    return _BLOCK_REASONS.get(meta.get("error_type") or "", fallback)


class ToolProgressMiddleware(Middleware):
    def __init__(self, config: ToolProgressConfig | None = None) -> None:
        self.config = config or ToolProgressConfig(enabled=True)
        self._phases: dict[str, ToolPhase] = {}
        self._pending: list[str] = []

    async def before_agent(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        self._phases, self._pending = {}, []
        return None

    async def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolResult:
        name = request.name
        if not name or name in self.config.exempt_tools:
            return await handler(request)
        current = self._phases.get(name, ToolPhase())
        if current.phase == "blocked":
            logger.info("tool_progress: %s call intercepted (blocked): %s", name, current.block_reason)
            return ToolMessage(
                f"[TOOL_BLOCKED] {current.block_reason}",
                tool_call_id=request.call_id,
                name=name,
                status="error",
                id=request.ctx.uuid(),
                additional_kwargs={
                    TOOL_META_KEY: {
                        "status": "error",
                        "error_type": "blocked_by_progress_guard",
                        "recoverable_by_model": True,
                        "recommended_next_action": "summarize",
                        "source": "progress_middleware",
                    }
                },
            )
        result = await handler(request)
        meta = (result.additional_kwargs or {}).get(TOOL_META_KEY) if isinstance(result, ToolMessage) else None
        if isinstance(result, ToolMessage) and isinstance(meta, dict):
            content = result.content if isinstance(result.content, str) else ""
            before = self._phases.get(name, ToolPhase())  # parallel calls of one tool: the newest state
            after, hint = self.transition(before, meta, content)
            self._phases[name] = after
            if after.phase != before.phase:
                logger.info("tool_progress: %s -> %s (%s)", name, after.phase.upper(), after.block_reason or "")
            if hint and self.config.inject_assessment and len(self._pending) < MAX_PENDING_PER_RUN:
                self._pending.append(hint)
        return result

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AIMessage:
        hints, self._pending = self._pending, []
        if not hints:
            return await handler(request)
        hint = HumanMessage("\n\n".join(dict.fromkeys(hints)), name=HINT_MESSAGE_NAME)
        return await handler(request.override(messages=[*request.messages, hint]))

    def transition(self, state: ToolPhase, meta: dict[str, Any], content: str) -> tuple[ToolPhase, str | None]:
        """DeerFlow's ``_assess_and_transition``: the next state and the hint to queue, if any."""
        if state.phase == "blocked":
            return state, None
        count = state.consecutive_problems + 1
        recoverable = bool(meta.get("recoverable_by_model"))
        if not recoverable and meta.get("recommended_next_action") == "stop":
            return dataclasses.replace(
                state, phase="blocked", consecutive_problems=count, block_reason=block_reason(meta)
            ), None
        status = meta.get("status")
        words = word_set(content) if status == "success" else frozenset()
        config = self.config
        duplicate = status == "success" and is_near_duplicate(
            words, state.recent_word_sets, config.jaccard_similarity_threshold, config.min_word_count_for_similarity
        )
        if status not in ("error", "partial_success") and not duplicate:
            recent = (*state.recent_word_sets, words)[-3:]
            return dataclasses.replace(state, phase="active", consecutive_problems=0, recent_word_sets=recent), None
        if count >= config.stagnation_threshold + config.warn_escalation_count and not recoverable:
            return dataclasses.replace(
                state, phase="blocked", consecutive_problems=count, block_reason=block_reason(meta)
            ), None
        if count >= config.stagnation_threshold:
            return dataclasses.replace(state, phase="warned", consecutive_problems=count), format_hint(meta)
        return dataclasses.replace(state, consecutive_problems=count), None

    def export_memory(self) -> dict[str, Any] | None:
        if not self._phases and not self._pending:
            return None
        phases = {
            name: {**dataclasses.asdict(p), "recent_word_sets": [sorted(ws) for ws in p.recent_word_sets]}
            for name, p in self._phases.items()
        }
        return {"phases": phases, "pending": list(self._pending)}

    def import_memory(self, memory: dict[str, Any]) -> None:
        self._phases = {
            name: ToolPhase(
                phase=p["phase"],
                consecutive_problems=p["consecutive_problems"],
                block_reason=p["block_reason"],
                recent_word_sets=tuple(frozenset(ws) for ws in p["recent_word_sets"]),
            )
            for name, p in memory.get("phases", {}).items()
        }
        self._pending = list(memory.get("pending", []))
