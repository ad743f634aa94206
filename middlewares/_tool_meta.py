"""``deerflow_tool_meta``: the structured verdict on a tool result (DeerFlow's ``tool_result_meta.py``).

Every result that passes ToolErrorHandling carries ``additional_kwargs["deerflow_tool_meta"]`` so that later
consumers (ToolProgress, receipts, UIs) read a signal instead of sniffing text::

    {"status": "success" | "error" | "partial_success",
     "error_type": "auth" | "rate_limited" | "transient" | "config" | "permission" | "no_results"
                   | "not_found" | "internal" | "unknown" | None,
     "recoverable_by_model": bool,
     "recommended_next_action": "continue" | "rewrite_query" | "try_alternative" | "summarize" | "stop",
     "source": "exception" | "tool_return" | "content_analysis" | "progress_middleware"}

The keyword rules are DeerFlow's; the first matching rule wins, and bare status codes (``401``, ``500``…)
match as whole words only, so "took 500ms" is not an internal error. Functions here return new messages
rather than mutating the ones they are given.
"""

from __future__ import annotations

import json
import re
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage

from middlewares.base import Command, ToolResult

TOOL_META_KEY = "deerflow_tool_meta"

_ERROR_PREFIX = "Error:"
_PARTIAL_MARKERS = (
    "partial results",
    "limited results",
    "truncated",
    "results may be incomplete",
    # Tools that report "nothing found" as a success still need the model to try another query.
    "no results found",
    "no content found",
    "no images found",
)

_ERROR_RULES: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (
        ("401", "403", "unauthorized", "authentication", "invalid api key"),
        {"error_type": "auth", "recoverable_by_model": False, "recommended_next_action": "stop"},
    ),
    (
        ("rate limit", "rate limited", "rate_limit"),
        {"error_type": "rate_limited", "recoverable_by_model": False, "recommended_next_action": "summarize"},
    ),
    (
        ("timeout", "timed out", "connection", "network error", "temporarily unavailable"),
        {"error_type": "transient", "recoverable_by_model": False, "recommended_next_action": "try_alternative"},
    ),
    (
        ("not configured", "not installed", "missing required", "disabled", "no api key"),
        {"error_type": "config", "recoverable_by_model": False, "recommended_next_action": "stop"},
    ),
    (
        ("permission denied", "access denied", "path traversal", "forbidden"),
        {"error_type": "permission", "recoverable_by_model": True, "recommended_next_action": "try_alternative"},
    ),
    (
        ("no results found", "no content found", "no images found", "no results"),
        {"error_type": "no_results", "recoverable_by_model": True, "recommended_next_action": "rewrite_query"},
    ),
    (
        ("not found", "no such file", "does not exist", "404"),
        {"error_type": "not_found", "recoverable_by_model": True, "recommended_next_action": "rewrite_query"},
    ),
    (
        ("unexpected error", "internal error", "500"),
        {"error_type": "internal", "recoverable_by_model": False, "recommended_next_action": "stop"},
    ),
)
_UNKNOWN_ERROR: dict[str, Any] = {
    "error_type": "unknown",
    "recoverable_by_model": True,
    "recommended_next_action": "try_alternative",
}
_NUMERIC_KEYWORDS = {
    keyword: re.compile(rf"\b{keyword}\b") for keywords, _ in _ERROR_RULES for keyword in keywords if keyword.isdigit()
}
# Values tools put in an ``error`` field to mean "no error".
_NO_ERROR_VALUES = frozenset({"none", "null", "false", "no", "ok", "success", "n/a", ""})


def _matches(keyword: str, lower: str) -> bool:
    numeric = _NUMERIC_KEYWORDS.get(keyword)
    return bool(numeric.search(lower)) if numeric is not None else keyword in lower


def classify_error_text(text: str) -> dict[str, Any]:
    lower = text.lower()
    for keywords, attrs in _ERROR_RULES:
        if any(_matches(keyword, lower) for keyword in keywords):
            return dict(attrs)
    return dict(_UNKNOWN_ERROR)


def _json_error_text(content: str) -> str | None:
    """The ``error`` field of a JSON-object result, unless it is empty or a conventional "no error" value.

    Non-string values are re-serialised as JSON so the keyword rules see ``404``, not a Python repr.
    """
    try:
        data = json.loads(content)
    except ValueError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    if not error:
        return None
    if isinstance(error, str):
        return None if error.lower().strip() in _NO_ERROR_VALUES else error
    return json.dumps(error)


def _is_json_object(content: str) -> bool:
    try:
        return isinstance(json.loads(content), dict)
    except ValueError:
        return False


def make_meta(
    *,
    status: str,
    source: str,
    error_type: str | None = None,
    recoverable_by_model: bool = True,
    recommended_next_action: str = "continue",
) -> dict[str, Any]:
    return {
        "status": status,
        "error_type": error_type,
        "recoverable_by_model": recoverable_by_model,
        "recommended_next_action": recommended_next_action,
        "source": source,
    }


def _with_meta(message: ToolMessage, meta: dict[str, Any]) -> ToolMessage:
    return message.model_copy(update={"additional_kwargs": {**(message.additional_kwargs or {}), TOOL_META_KEY: meta}})


def stamp_exception_meta(message: ToolMessage, exc_info: str) -> ToolMessage:
    """Stamp an exception-derived message, classified from ``exc_info`` (``"ExcClass: detail"``).

    Always overwrites: an exception is a stronger signal than whatever the tool stamped itself.
    """
    return _with_meta(message, make_meta(status="error", source="exception", **classify_error_text(exc_info)))


def tool_result_meta(message: ToolMessage) -> dict[str, Any]:
    """The verdict on a result the tool returned (rules in DeerFlow's order)."""
    content = message.content if isinstance(message.content, str) else ""
    if message.status == "error" and not content.startswith(_ERROR_PREFIX):
        # Classify the ``error`` field only: other JSON fields ({"user_id": 401}) must not match a keyword.
        json_error = _json_error_text(content)
        if json_error is not None:
            attrs = classify_error_text(json_error)
        else:
            attrs = dict(_UNKNOWN_ERROR) if _is_json_object(content) else classify_error_text(content)
        return make_meta(status="error", source="tool_return", **attrs)
    if content.startswith(_ERROR_PREFIX):
        return make_meta(status="error", source="tool_return", **classify_error_text(content[len(_ERROR_PREFIX) :]))
    if (json_error := _json_error_text(content)) is not None:
        return make_meta(status="error", source="tool_return", **classify_error_text(json_error))
    lower = content.lower()
    if any(marker in lower for marker in _PARTIAL_MARKERS):
        return make_meta(status="partial_success", source="content_analysis", recommended_next_action="rewrite_query")
    return make_meta(status="success", source="content_analysis")


def normalize_tool_message(message: ToolMessage) -> ToolMessage:
    """``message`` stamped with its verdict; an existing stamp (the tool's own) is kept."""
    if (message.additional_kwargs or {}).get(TOOL_META_KEY) is not None:
        return message
    return _with_meta(message, tool_result_meta(message))


def normalize_tool_result(result: ToolResult, *, tool_call_id: str) -> ToolResult:
    """Stamp a result; inside a Command only the ToolMessage answering ``tool_call_id`` is stamped."""
    if isinstance(result, ToolMessage):
        return normalize_tool_message(result)
    messages = result.update.get("messages")
    if messages is None:
        return result

    def stamp(message: BaseMessage) -> BaseMessage:
        if isinstance(message, ToolMessage) and (not tool_call_id or message.tool_call_id == tool_call_id):
            return normalize_tool_message(message)
        return message

    stamped = [stamp(m) for m in messages] if isinstance(messages, list) else stamp(messages)
    return Command(update={**result.update, "messages": stamped}, interrupt=result.interrupt)
