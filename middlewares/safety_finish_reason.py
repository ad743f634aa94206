"""SafetyFinishReason: a response the provider stopped for safety reasons never runs its tools.

Providers can stop a response mid-generation for safety (OpenAI ``finish_reason="content_filter"``, Anthropic
``stop_reason="refusal"``, Gemini ``finish_reason="SAFETY"`` …) and still return half-written tool calls;
executing them writes truncated files the model then tries to repair, gets filtered again, and loops
(DeerFlow #3028). An empty safety-stopped reply, persisted as is, makes strict providers reject every later
request of the thread (#4393).

Hook
* ``after_model``: when a detector fires on the last AIMessage and it has tool calls, or has neither tool
  calls nor visible text, the message is rewritten (**thread state**, same id): tool calls cleared, structured
  and raw (``finish_reason`` is kept: it is the provider's real reason), the reference's explanation appended
  (or, for a blank reply, written as its content), and ``additional_kwargs["safety_termination"]`` stamped.
  ``ctx.stop("safety_capped", …)`` with a ``safety_termination`` progress event (tool names and ids,
  never arguments: they are what the provider filtered) are the **side effects**. A safety stop with visible
  text and no tool calls is left alone, so its partial answer reaches the user.

Detectors: the three built-ins below, or the configured list (``use: module:Class`` + ``config`` kwargs). They
run in the workflow on every response, so they must be pure functions of the message; one that raises counts
as no match. The middleware sits after LoopDetection in the chain: ``after_model`` runs in reverse, so it sees
the raw response first and LoopDetection counts the cleaned message.

Per-run memory: none.

Parts: none outside this module (configured detectors load through ``vocabulary/class_path.py``; helpers:
``middlewares/_tool_calls.py``); tests: ``tests/test_safety_finish_reason.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from langchain_core.messages import AIMessage
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from middlewares._logging import hook_logger
from middlewares._tool_calls import append_text, clone_with_tool_calls
from middlewares.base import Middleware
from middlewares.context import RunContext
from vocabulary.class_path import ClassPathError, check_class_path, load_class_path
from vocabulary.messages import message_text
from vocabulary.state import StateUpdate, ThreadState

logger = hook_logger(__name__)

STOP_REASON = "safety_capped"

SUPPRESSED_TEXT = (
    "The model provider stopped this response with a safety-related signal "
    "({reason_field}={reason_value!r}, detector={detector!r}). Any tool calls produced in this turn were "
    "suppressed because their arguments may be truncated and unsafe to execute. Please rephrase the request "
    "or ask for a narrower output."
)
EMPTY_TEXT = (
    "The model provider stopped this response with a safety-related signal "
    "({reason_field}={reason_value!r}, detector={detector!r}) and returned no content. Please rephrase your "
    "request or start a new conversation."
)


@dataclass(frozen=True)
class SafetyTermination:
    """What a detector found: which detector, which metadata field carried the signal, and its value."""

    detector: str
    reason_field: str
    reason_value: str
    extras: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class SafetyTerminationDetector(Protocol):
    name: str

    def detect(self, message: AIMessage) -> SafetyTermination | None: ...


def metadata_value(message: AIMessage, key: str) -> str | None:
    """A string from ``response_metadata`` (modern adapters) or ``additional_kwargs`` (legacy paths); for every
    detector of a finish signal (``middlewares/model_length_finish_reason.py`` too)."""
    for container in (message.response_metadata, message.additional_kwargs):
        value = container.get(key) if isinstance(container, dict) else None
        if isinstance(value, str) and value:
            return value
    return None


class OpenAICompatibleContentFilterDetector:
    """``finish_reason == "content_filter"`` (OpenAI, Azure, Moonshot, DeepSeek, Mistral, vLLM, Qwen …)."""

    name = "openai_compatible_content_filter"

    def __init__(self, finish_reasons: list[str] | None = None) -> None:
        self._finish_reasons = frozenset(
            r.lower() for r in (["content_filter"] if finish_reasons is None else finish_reasons)
        )

    def detect(self, message: AIMessage) -> SafetyTermination | None:
        value = metadata_value(message, "finish_reason")
        if value is None or value.lower() not in self._finish_reasons:
            return None
        results = message.response_metadata.get("content_filter_results")
        extras = {"content_filter_results": results} if results else {}
        return SafetyTermination(self.name, "finish_reason", value, extras)


class AnthropicRefusalDetector:
    """``stop_reason == "refusal"``."""

    name = "anthropic_refusal"

    def __init__(self, stop_reasons: list[str] | None = None) -> None:
        self._stop_reasons = frozenset(r.lower() for r in (["refusal"] if stop_reasons is None else stop_reasons))

    def detect(self, message: AIMessage) -> SafetyTermination | None:
        value = metadata_value(message, "stop_reason")
        if value is None or value.lower() not in self._stop_reasons:
            return None
        return SafetyTermination(self.name, "stop_reason", value)


class GeminiSafetyDetector:
    """Gemini / Vertex AI safety finish reasons."""

    name = "gemini_safety"
    DEFAULT_FINISH_REASONS: ClassVar[tuple[str, ...]] = (
        "SAFETY",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "RECITATION",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
    )

    def __init__(self, finish_reasons: list[str] | None = None) -> None:
        self._finish_reasons = frozenset(
            r.upper() for r in (self.DEFAULT_FINISH_REASONS if finish_reasons is None else finish_reasons)
        )

    def detect(self, message: AIMessage) -> SafetyTermination | None:
        value = metadata_value(message, "finish_reason")
        if value is None or value.upper() not in self._finish_reasons:
            return None
        ratings = message.response_metadata.get("safety_ratings")
        extras = {"safety_ratings": ratings} if ratings else {}
        return SafetyTermination(self.name, "finish_reason", value, extras)


def default_detectors() -> list[SafetyTerminationDetector]:
    return [OpenAICompatibleContentFilterDetector(), AnthropicRefusalDetector(), GeminiSafetyDetector()]


class DetectorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    use: str = Field(description="'package.module:ClassName' of a class with `name` and `detect(message)`")
    config: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of its constructor")

    @field_validator("use")
    @classmethod
    def _module_class(cls, value: str) -> str:
        check_class_path(value)
        return value

    @model_validator(mode="after")
    def _builds(self) -> DetectorConfig:
        # Detectors are built when a run starts, inside the workflow: a bad entry must fail when the config
        # loads, where the error names the key, not as a workflow task that fails on every retry.
        build_detector(self)
        return self


class SafetyFinishReasonConfig(BaseModel):
    """DeerFlow's ``safety_finish_reason`` section."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    detectors: list[DetectorConfig] | None = Field(None, description="null: the built-in detectors")

    @field_validator("detectors")
    @classmethod
    def _not_empty(cls, value: list[DetectorConfig] | None) -> list[DetectorConfig] | None:
        if value is not None and not value:
            raise ValueError(
                "detectors must be omitted (use built-ins) or contain at least one entry; "
                "use enabled=false to disable the middleware entirely"
            )
        return value


def build_detector(entry: DetectorConfig) -> SafetyTerminationDetector:
    try:
        detector_class = load_class_path(entry.use)
    except ClassPathError as exc:
        raise ValueError(f"cannot load detector {entry.use!r}: {exc}") from None
    try:
        detector = detector_class(**entry.config)
    except TypeError as exc:
        raise ValueError(f"cannot build detector {entry.use!r} with config {entry.config!r}: {exc}") from None
    if not isinstance(detector, SafetyTerminationDetector):
        raise ValueError(
            f"{entry.use} did not produce a SafetyTerminationDetector (got {type(detector).__name__}); "
            "it needs a `name` attribute and a `detect(message)` method"
        )
    return detector


class SafetyFinishReasonMiddleware(Middleware):
    def __init__(self, detectors: list[SafetyTerminationDetector] | None = None) -> None:
        self.detectors = list(detectors) if detectors else default_detectors()

    @classmethod
    def from_config(cls, config: SafetyFinishReasonConfig) -> SafetyFinishReasonMiddleware:
        if config.detectors is None:
            return cls()
        return cls([build_detector(entry) for entry in config.detectors])

    async def after_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        last = state.messages[-1] if state.messages else None
        if not isinstance(last, AIMessage):
            return None
        tool_calls = list(last.tool_calls)
        blank = not message_text(last).strip()
        if not tool_calls and not blank:
            return None
        termination = self._detect(last)
        if termination is None:
            return None

        names = [str(call.get("name") or "unknown") for call in tool_calls]
        logger.warning(
            "provider safety termination on thread %s (%s=%r, detector=%r): suppressed %d tool call(s) %s",
            ctx.thread_id,
            termination.reason_field,
            termination.reason_value,
            termination.detector,
            len(names),
            names,
        )
        ctx.stop(
            STOP_REASON,
            "safety_termination",
            action="suppress_tool_calls",
            detector=termination.detector,
            reason_field=termination.reason_field,
            reason_value=termination.reason_value,
            suppressed_tool_call_count=len(names),
            suppressed_tool_call_names=names,
            suppressed_tool_call_ids=[call["id"] for call in tool_calls if call.get("id")],
            message_id=last.id,
            thread_id=ctx.thread_id,
        )
        return {"messages": [suppressed_message(last, termination)]}

    def _detect(self, message: AIMessage) -> SafetyTermination | None:
        for detector in self.detectors:
            try:
                hit = detector.detect(message)
            except Exception:
                # A buggy detector must not break the run: it counts as no match.
                logger.exception("safety detector %r raised; treating it as no match", detector.name)
                continue
            if hit is not None:
                return hit
        return None


def suppressed_message(message: AIMessage, termination: SafetyTermination) -> AIMessage:
    """``message`` without tool calls, with the explanation and the ``safety_termination`` record."""
    template = SUPPRESSED_TEXT if message.tool_calls else EMPTY_TEXT
    explanation = template.format(
        reason_field=termination.reason_field, reason_value=termination.reason_value, detector=termination.detector
    )
    content = explanation if message.content in (None, "") else append_text(message.content, explanation)
    cleared = clone_with_tool_calls(message, [], content=content)
    kwargs = dict(cleared.additional_kwargs)
    kwargs["safety_termination"] = {
        "detector": termination.detector,
        "reason_field": termination.reason_field,
        "reason_value": termination.reason_value,
        "suppressed_tool_call_count": len(message.tool_calls),
        "suppressed_tool_call_names": [str(call.get("name") or "unknown") for call in message.tool_calls],
        "extras": dict(termination.extras),
    }
    return cleared.model_copy(update={"additional_kwargs": kwargs})
