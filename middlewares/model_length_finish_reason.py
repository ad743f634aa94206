"""ModelLengthFinishReason: a final answer the provider cut at its output limit is reported as such (DeerFlow's
``ModelLengthFinishReasonMiddleware``, always on in the lead chain, DeerFlow #4271).

A provider that runs out of output tokens says so (OpenAI-compatible ``finish_reason="length"``, Anthropic
``stop_reason="max_tokens"``, Gemini ``finish_reason="MAX_TOKENS"``) and still returns the text it wrote. The run
should keep that text but must not look like a clean completion.

Hook
* ``after_model``: when the last AIMessage is terminal (no tool calls, no invalid ones, no raw ``tool_calls`` or
  ``function_call``), has visible text and a detector fires, the run's stop reason becomes
  ``model_length_capped`` unless an earlier cap already set one (DeerFlow keeps the first), with a
  ``model_length_termination`` progress event naming the detector and the signal. The message is never changed.

Writes: the run's stop reason and a progress event (through ``ctx.stop``); no state.

Per-run memory: none.

Parts: the stop reason reaches the run's view, its search attributes and its Web UI details
(``workflows/run/visibility.py``). Tests: ``tests/test_finish_reasons.py``.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage

from middlewares._logging import hook_logger
from middlewares.base import Middleware
from middlewares.context import RunContext
from middlewares.safety_finish_reason import SafetyTermination, metadata_value
from vocabulary.state import StateUpdate, ThreadState

logger = hook_logger(__name__)

STOP_REASON = "model_length_capped"

# (detector name, metadata field, accepted values): DeerFlow's three built-in detectors, in its order.
# OpenAI-compatible values compare lower-cased, Gemini's upper-cased, Anthropic's lower-cased.
DETECTORS: tuple[tuple[str, str, frozenset[str], bool], ...] = (
    ("openai_compatible_length", "finish_reason", frozenset({"length"}), False),
    ("anthropic_max_tokens", "stop_reason", frozenset({"max_tokens"}), False),
    ("gemini_max_tokens", "finish_reason", frozenset({"MAX_TOKENS"}), True),
)


class ModelLengthFinishReasonMiddleware(Middleware):
    async def after_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        last = state.messages[-1] if state.messages else None
        if not isinstance(last, AIMessage) or has_tool_call_intent(last) or not has_visible_content(last):
            return None
        termination = detect_length_cap(last)
        if termination is None:
            return None
        stamped = ctx.stop_reason is None
        logger.info(
            "Provider model length cap detected on thread %s (%s=%r, detector=%r, stamped_stop_reason=%s)",
            ctx.thread_id,
            termination.reason_field,
            termination.reason_value,
            termination.detector,
            stamped,
        )
        if stamped:
            ctx.stop(
                STOP_REASON,
                "model_length_termination",
                detector=termination.detector,
                reason_field=termination.reason_field,
                reason_value=termination.reason_value,
                message_id=last.id,
            )
        return None


def detect_length_cap(message: AIMessage) -> SafetyTermination | None:
    """The first detector that sees a length signal in ``response_metadata`` (else ``additional_kwargs``)."""
    for name, key, values, upper in DETECTORS:
        value = metadata_value(message, key)
        if value is not None and (value.upper() if upper else value.lower()) in values:
            return SafetyTermination(name, key, value)
    return None


def has_tool_call_intent(message: AIMessage) -> bool:
    kwargs = message.additional_kwargs or {}
    return bool(
        message.tool_calls or message.invalid_tool_calls or kwargs.get("tool_calls") or kwargs.get("function_call")
    )


def has_visible_content(message: AIMessage) -> bool:
    content = message.content
    if isinstance(content, str):
        return bool(content.strip())
    for block in content:
        if isinstance(block, str) and block.strip():
            return True
        if isinstance(block, dict) and block.get("type") in {"text", "output_text"}:
            text = block.get("text")
            if isinstance(text, str) and text.strip():
                return True
    return False
