"""LoopDetection: a run that keeps calling tools without producing an answer is warned, then stopped.

Two layers watch the tool calls of every model response (DeerFlow's ``loop_detection_middleware.py``):

1. **Identical call sets.** Each response's calls hash to ``md5[:12]`` of their sorted ``name:key`` list,
   where the key is what makes two calls "the same": for ``read_file`` the path and 200-line buckets of
   the range, for ``write_file``/``str_replace`` every argument, otherwise the salient fields
   (``path, url, query, command, pattern, glob, cmd``) or, without any, every argument. In the last
   ``window_size`` responses, the ``warn_threshold``-th repeat of a hash queues a warning (once per hash
   while it stays in the window) and the ``hard_limit``-th forces a stop.
2. **Same tool, many times.** Over the last ``max(window_size, tool_freq_hard_limit, override hard limits)``
   calls, a tool called ``tool_freq_warn`` times (per-tool overrides win) queues a warning (once, until its
   count falls back below the threshold) and ``tool_freq_hard_limit`` times forces a stop.

A forced stop takes precedence over warnings and layer 1 over layer 2.

Hooks
* ``after_model``: detection. A forced stop rewrites the AIMessage (**thread state**, same id): tool calls
  cleared, structured and raw, ``finish_reason`` ``tool_calls`` → ``stop``, and a ``[FORCED STOP]`` line
  appended, so the loop ends with that message as the answer; ``ctx.stop("loop_capped", …)``. A
  warning is only queued (**per-run memory**): the tool results of this turn do not exist yet, and a
  message inserted between the calls and their results would break the call/result pairing strict
  providers enforce.
* ``wrap_model_call``: drains the queue into one ``HumanMessage(name="loop_warning")`` appended to the next
  request (**request overlay**: it never reaches thread state).

Progress events: ``loop_warning`` and ``loop_forced_stop``.

Per-run memory: the windows, warned sets and pending warnings. The instance lives for one run, so DeerFlow's
per-thread keying, LRU and before/after_agent cleanup have nothing to do here; the memory travels across
continue-as-new through :meth:`export_memory`.

Parts: none outside this module (helpers: ``middlewares/_tool_calls.py``; its memory rides
``workflows/run/carry.py``); tests: ``tests/test_loop_detection.py``.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, deque
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from pydantic import BaseModel, ConfigDict, Field, model_validator

from middlewares._logging import hook_logger
from middlewares._tool_calls import append_text, clone_with_tool_calls
from middlewares.base import Middleware, ModelHandler, ModelRequest
from middlewares.context import RunContext
from vocabulary.state import StateUpdate, ThreadState

logger = hook_logger(__name__)

STOP_REASON = "loop_capped"
WARNING_NAME = "loop_warning"

WARNING_TEXT = (
    "[LOOP DETECTED] You are repeating the same tool calls. Stop calling tools and produce your final answer "
    "now. If you cannot complete the task, summarize what you accomplished so far."
)
TOOL_FREQ_WARNING_TEXT = (
    "[LOOP DETECTED] You have called {tool_name} {count} times without producing a final answer. Stop calling "
    "tools and produce your final answer now. If you cannot complete the task, summarize what you accomplished "
    "so far."
)
HARD_STOP_TEXT = (
    "[FORCED STOP] Repeated tool calls exceeded the safety limit. Producing final answer with results collected so far."
)
TOOL_FREQ_HARD_STOP_TEXT = (
    "[FORCED STOP] Tool {tool_name} called {count} times — exceeded the per-tool safety limit. Producing final "
    "answer with results collected so far."
)

MAX_PENDING_WARNINGS = 4
READ_FILE_BUCKET_LINES = 200
SALIENT_FIELDS = ("path", "url", "query", "command", "pattern", "glob", "cmd")
CONTENT_SENSITIVE_TOOLS = frozenset({"write_file", "str_replace"})


class ToolFreqOverride(BaseModel):
    model_config = ConfigDict(extra="forbid")

    warn: int = Field(ge=1)
    hard_limit: int = Field(ge=1)

    @model_validator(mode="after")
    def _hard_at_least_warn(self) -> ToolFreqOverride:
        if self.hard_limit < self.warn:
            raise ValueError(f"hard_limit ({self.hard_limit}) must be >= warn ({self.warn})")
        return self


class LoopDetectionConfig(BaseModel):
    """DeerFlow's ``loop_detection`` section, minus ``max_tracked_threads`` (there is one run per instance)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    warn_threshold: int = Field(3, ge=1, description="identical call sets before a warning")
    hard_limit: int = Field(5, ge=1, description="identical call sets before a forced stop")
    window_size: int = Field(20, ge=1, description="model responses the identical-set layer remembers")
    tool_freq_warn: int = Field(30, ge=1, description="calls of one tool before a warning")
    tool_freq_hard_limit: int = Field(50, ge=1, description="calls of one tool before a forced stop")
    tool_freq_overrides: dict[str, ToolFreqOverride] = Field(
        default_factory=dict, description="per-tool {warn, hard_limit} replacing the two above"
    )

    @model_validator(mode="after")
    def _hard_at_least_warn(self) -> LoopDetectionConfig:
        if self.hard_limit < self.warn_threshold:
            raise ValueError(f"hard_limit ({self.hard_limit}) must be >= warn_threshold ({self.warn_threshold})")
        if self.tool_freq_hard_limit < self.tool_freq_warn:
            raise ValueError(
                f"tool_freq_hard_limit ({self.tool_freq_hard_limit}) must be >= tool_freq_warn ({self.tool_freq_warn})"
            )
        return self


class LoopDetectionMiddleware(Middleware):
    def __init__(self, config: LoopDetectionConfig | None = None) -> None:
        self.config = config or LoopDetectionConfig()
        cfg = self.config
        # The frequency window must hold at least the largest limit, or that limit could never be reached.
        self._freq_window = max(
            cfg.window_size, cfg.tool_freq_hard_limit, *(o.hard_limit for o in cfg.tool_freq_overrides.values())
        )
        self._history: list[str] = []
        self._warned: set[str] = set()
        self._tool_names: deque[str] = deque(maxlen=self._freq_window)
        self._freq_warned: set[str] = set()
        self._pending: list[str] = []

    async def after_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        last = state.messages[-1] if state.messages else None
        if not isinstance(last, AIMessage) or not last.tool_calls:
            return None
        typed = typed_tool_calls(list(last.tool_calls))
        stop, warnings = self._track(typed)
        if stop is not None:
            logger.warning("loop hard limit reached on thread %s: %s", ctx.thread_id, stop)
            ctx.stop(STOP_REASON, "loop_forced_stop", tools=[name for name, _ in typed], message=stop)
            return {"messages": [clone_with_tool_calls(last, [], content=append_text(last.content, stop))]}
        for warning in warnings:
            logger.warning("repetitive tool calls on thread %s: %s", ctx.thread_id, warning)
            ctx.emit("loop_warning", tools=[name for name, _ in typed], message=warning)
            self._queue(warning)
        return None

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AIMessage:
        if self._pending:
            warning = HumanMessage("\n\n".join(self._pending), name=WARNING_NAME)
            self._pending = []
            # Appended after every message, so each AIMessage keeps its tool results right behind it.
            request = request.override(messages=[*request.messages, warning])
        return await handler(request)

    def _track(self, typed: list[tuple[str, str]]) -> tuple[str | None, list[str]]:
        """Record one response's calls in both layers; return (forced-stop text or None, warnings)."""
        cfg = self.config
        call_hash = hash_typed_calls(typed)
        self._history = [*self._history, call_hash][-cfg.window_size :]
        # A hash that left the window may warn again if it comes back.
        self._warned &= set(self._history)
        repeats = self._history.count(call_hash)

        names = [name for name, _ in typed if name]
        self._tool_names.extend(names)
        counts = Counter(self._tool_names)
        self._freq_warned = {name for name in self._freq_warned if counts[name] >= self._limits(name)[0]}

        if repeats >= cfg.hard_limit:
            return HARD_STOP_TEXT, []
        for name in dict.fromkeys(names):
            if counts[name] >= self._limits(name)[1]:
                return TOOL_FREQ_HARD_STOP_TEXT.format(tool_name=name, count=counts[name]), []

        warnings: list[str] = []
        if repeats >= cfg.warn_threshold and call_hash not in self._warned:
            self._warned.add(call_hash)
            warnings.append(WARNING_TEXT)
        for name in dict.fromkeys(names):
            if counts[name] >= self._limits(name)[0] and name not in self._freq_warned:
                self._freq_warned.add(name)
                warnings.append(TOOL_FREQ_WARNING_TEXT.format(tool_name=name, count=counts[name]))
        return None, warnings

    def _limits(self, tool_name: str) -> tuple[int, int]:
        override = self.config.tool_freq_overrides.get(tool_name)
        if override is not None:
            return override.warn, override.hard_limit
        return self.config.tool_freq_warn, self.config.tool_freq_hard_limit

    def _queue(self, warning: str) -> None:
        if warning not in self._pending:
            self._pending = [*self._pending, warning][-MAX_PENDING_WARNINGS:]

    def export_memory(self) -> dict[str, Any] | None:
        return {
            "history": list(self._history),
            "warned": sorted(self._warned),
            "tool_names": list(self._tool_names),
            "freq_warned": sorted(self._freq_warned),
            "pending": list(self._pending),
        }

    def import_memory(self, memory: dict[str, Any]) -> None:
        self._history = list(memory["history"])
        self._warned = set(memory["warned"])
        self._tool_names = deque(memory["tool_names"], maxlen=self._freq_window)
        self._freq_warned = set(memory["freq_warned"])
        self._pending = list(memory["pending"])


def typed_tool_calls(tool_calls: list[Any]) -> list[tuple[str, str]]:
    """Each call as ``(name, stable key)``."""
    typed = []
    for call in tool_calls:
        name = str(call.get("name") or "")
        args, fallback = _normalize_args(call.get("args", {}))
        typed.append((name, _stable_key(name, args, fallback)))
    return typed


def hash_typed_calls(typed: list[tuple[str, str]]) -> str:
    """Order-independent hash of a multiset of calls: the same calls in any order hash alike."""
    blob = json.dumps(sorted(f"{name}:{key}" for name, key in typed), sort_keys=True, default=str)
    return hashlib.md5(blob.encode()).hexdigest()[:12]


def _normalize_args(raw: Any) -> tuple[dict[str, Any], str | None]:
    """Args as a dict, plus a fallback key when they are not one (some providers send a JSON string)."""
    if isinstance(raw, dict):
        return raw, None
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return {}, raw
        if isinstance(parsed, dict):
            return parsed, None
        return {}, json.dumps(parsed, sort_keys=True, default=str)
    if raw is None:
        return {}, None
    return {}, json.dumps(raw, sort_keys=True, default=str)


def _stable_key(name: str, args: dict[str, Any], fallback: str | None) -> str:
    if name == "read_file" and fallback is None:
        start = _line(args.get("start_line"), 1)
        end = _line(args.get("end_line"), start)
        start, end = sorted((start, end))
        first, last = ((max(line, 1) - 1) // READ_FILE_BUCKET_LINES for line in (start, end))
        return f"{args.get('path') or ''}:{first}-{last}"
    # Content-sensitive tools: the same path is legitimately rewritten with different payloads.
    if name in CONTENT_SENSITIVE_TOOLS:
        return fallback if fallback is not None else json.dumps(args, sort_keys=True, default=str)
    salient = {key: args[key] for key in SALIENT_FIELDS if args.get(key) is not None}
    if salient:
        return json.dumps(salient, sort_keys=True, default=str)
    return fallback if fallback is not None else json.dumps(args, sort_keys=True, default=str)


def _line(value: Any, default: int) -> int:
    if value is None:
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
