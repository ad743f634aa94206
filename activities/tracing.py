"""The spans activities add inside Temporal's ``RunActivity`` span: one per model call and one per tool call.

Attribute names follow OpenTelemetry's GenAI conventions where one exists (``gen_ai.*``) and are
``hartflow.*`` otherwise. Without a configured tracer provider these spans are OpenTelemetry's no-ops.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from vocabulary.contracts import ToolCallOutput

TRACER_NAME = "hartflow.activities"


@contextlib.contextmanager
def model_span(model: str, *, purpose: str, attempt: int) -> Iterator[Span]:
    attributes: dict[str, str | int] = {
        "gen_ai.request.model": model,
        "hartflow.purpose": purpose,
        "hartflow.attempt": attempt,
    }
    with trace.get_tracer(TRACER_NAME).start_as_current_span(f"model {model}", attributes=attributes) as span:
        yield span


def record_usage(span: Span, usage: Mapping[str, Any] | None) -> None:
    """Token counts of the response (LangChain's ``usage_metadata``), when the provider reported them."""
    if not usage:
        return
    span.set_attributes(
        {
            "gen_ai.usage.input_tokens": int(usage.get("input_tokens") or 0),
            "gen_ai.usage.output_tokens": int(usage.get("output_tokens") or 0),
            "hartflow.total_tokens": int(usage.get("total_tokens") or 0),
        }
    )


@contextlib.contextmanager
def tool_span(tool: str, *, sandbox_id: str | None) -> Iterator[Span]:
    attributes = {"hartflow.tool": tool, "hartflow.sandbox_id": sandbox_id or ""}
    with trace.get_tracer(TRACER_NAME).start_as_current_span(f"tool {tool}", attributes=attributes) as span:
        yield span


def record_tool_output(span: Span, output: ToolCallOutput, exit_code: int | None) -> None:
    """The tool's outcome: status, the sandbox it ran in (acquired lazily), a command's exit code."""
    span.set_attribute("hartflow.tool.status", output.status)
    if output.sandbox_id:
        span.set_attribute("hartflow.sandbox_id", output.sandbox_id)
    if exit_code is not None:
        span.set_attribute("hartflow.tool.exit_code", exit_code)
    if output.status == "error" or exit_code:
        span.set_status(Status(StatusCode.ERROR, output.content.splitlines()[-1] if output.content else None))
