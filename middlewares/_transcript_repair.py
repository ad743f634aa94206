"""DanglingToolCall's repair, pure: the transcript rebuilt so every tool call is answered right after it.

Steps 2-4 of ``middlewares/dangling_tool_call.py`` (step 1, the ids, is ``middlewares/_tool_call_ids.py``):
collect each AIMessage's calls, re-emit their results after it in call order, drop orphan results, answer
unanswered calls with DeerFlow's synthetic error results, and sanitise AIMessages for serialisation. The texts
are DeerFlow's (``bytedance/deer-flow:
backend/packages/harness/deerflow/agents/middlewares/dangling_tool_call_middleware.py``). Tested in
``tests/test_dangling_tool_call.py``.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from middlewares._logging import hook_logger
from middlewares._tool_call_ids import (
    normalize_arguments,
    normalize_name,
    normalize_tool_call_ids,
    parse_json_object,
    valid_text,
)

# The middleware's logger: the repair is logged as DanglingToolCall's, as before the split.
logger = hook_logger("middlewares.dangling_tool_call")

MAX_ERROR_DETAIL_CHARS = 500
"""Invalid calls can carry huge payloads (DeerFlow #2894); the recovery text echoes at most this much."""

INTERRUPTED_TEXT = "[Tool call was interrupted and did not return a result.]"
EMPTY_NAME_TEXT = (
    "[Tool call could not be executed because its name was missing or empty. "
    "Use one of the available tool names when retrying.]"
)
INVALID_ARGS_TEXT = "[Tool call could not be executed because its arguments were invalid.]"
INVALID_ARGS_DETAIL_TEXT = "[Tool call could not be executed because its arguments were invalid: {error}]"
INVALID_WRITE_FILE_TEXT = (
    "[write_file failed before execution: the tool-call arguments were not valid JSON, "
    "so no file was written. This often happens when the model tries to write a very "
    "large Markdown file in a single tool call, especially when `content` contains "
    "unescaped quotes, inline JSON, backslashes, or code fences. Do not retry the same "
    "large `write_file` payload for this artifact; provide the report/content directly "
    "as normal assistant text in your next response. If a file write is still needed "
    "later, split the file into smaller sections instead of one large payload.{details}]"
)


def patch_messages(messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
    """The repaired transcript, or ``None`` when ``messages`` is already well-formed."""
    normalized = normalize_tool_call_ids(messages)

    results_by_id: dict[str, deque[ToolMessage]] = defaultdict(deque)
    for message in normalized:
        if isinstance(message, ToolMessage):
            results_by_id[message.tool_call_id].append(message)
    call_ids = {
        call["id"]
        for message in normalized
        if isinstance(message, AIMessage)
        for call in _message_tool_calls(message)
        if call.get("id")
    }

    patched: list[BaseMessage] = []
    injected = dropped = 0
    for message in normalized:
        if isinstance(message, ToolMessage):
            # A paired result is re-emitted after its AIMessage; a result without a call is dropped.
            dropped += message.tool_call_id not in call_ids
            continue
        if not isinstance(message, AIMessage):
            patched.append(message)
            continue
        patched.append(_sanitize_ai_message(message))
        # The unsanitised calls still know which names were blank, which picks the synthetic text.
        for call in _message_tool_calls(message):
            call_id = call.get("id")
            if not call_id:
                continue
            queue = results_by_id.get(call_id)
            result = queue.popleft() if queue else None
            if result is None:
                patched.append(
                    ToolMessage(_synthetic_content(call), tool_call_id=call_id, name=call["name"], status="error")
                )
                injected += 1
                continue
            if call.get("invalid_tool_name") and not valid_text(result.name):
                result = result.model_copy(update={"name": call["name"]})
            patched.append(result)

    if not dropped and patched == list(messages):
        return None
    if dropped or injected:
        logger.warning(
            "DanglingToolCallMiddleware: %d orphan(s) dropped, %d placeholder(s) injected", dropped, injected
        )
    return patched


# -- steps 2-4: calls, synthetic results, sanitised AIMessages -------------------------------------------


def _message_tool_calls(message: AIMessage) -> list[dict[str, Any]]:
    """Every call the next request will serialise for ``message``, with normalised names.

    Invalid calls never ran, but provider adapters still serialise their id and name, so strict validators
    expect a result for them too; raw provider calls count only when both structured views are empty (the
    same gating as the id normalisation), or one call would be answered twice.
    """
    calls: list[dict[str, Any]] = []
    for call in message.tool_calls or []:
        if not isinstance(call, dict):
            continue
        entry: dict[str, Any] = {**call, "name": normalize_name(call.get("name"))}
        if not valid_text(call.get("name")):
            entry["invalid_tool_name"] = True
        calls.append(entry)

    if not message.tool_calls and not message.invalid_tool_calls:
        for raw in (message.additional_kwargs or {}).get("tool_calls") or []:
            if not isinstance(raw, dict):
                continue
            function = raw.get("function")
            name = raw.get("name")
            if not name and isinstance(function, dict):
                name = function.get("name")
            args = raw.get("args", {})
            if not args and isinstance(function, dict):
                args = parse_json_object(function.get("arguments")) or {}
            entry = {"id": raw.get("id"), "name": normalize_name(name), "args": args if isinstance(args, dict) else {}}
            if not valid_text(name):
                entry["invalid_tool_name"] = True
            calls.append(entry)

    for invalid in message.invalid_tool_calls or []:
        if not isinstance(invalid, dict):
            continue
        entry = {
            "id": invalid.get("id"),
            "name": normalize_name(invalid.get("name")),
            "args": {},
            "invalid": True,
            "error": invalid.get("error"),
        }
        if not valid_text(invalid.get("name")):
            entry["invalid_tool_name"] = True
        calls.append(entry)
    return calls


def _synthetic_content(call: dict[str, Any]) -> str:
    if call.get("invalid_tool_name"):
        return EMPTY_NAME_TEXT
    if not call.get("invalid"):
        return INTERRUPTED_TEXT
    error = call.get("error")
    detail = error[:MAX_ERROR_DETAIL_CHARS] if isinstance(error, str) and error else ""
    if call.get("name") == "write_file":
        # DeerFlow #2894: steer the model away from re-sending the same oversized payload.
        return INVALID_WRITE_FILE_TEXT.format(details=f" Parser error: {detail}" if detail else "")
    return INVALID_ARGS_DETAIL_TEXT.format(error=detail) if detail else INVALID_ARGS_TEXT


def invalid_call_result(call: Mapping[str, Any], *, message_id: str) -> ToolMessage:
    """The error result this middleware would patch in for an invalid tool call (its arguments did not parse),
    for the run loop, which answers such calls at once so the model sees the error in the same run."""
    name = normalize_name(call.get("name"))
    entry = {
        "name": name,
        "invalid": True,
        "error": call.get("error"),
        "invalid_tool_name": not valid_text(call.get("name")),
    }
    return ToolMessage(
        _synthetic_content(entry), tool_call_id=call.get("id") or "", name=name, status="error", id=message_id
    )


def _sanitize_ai_message(message: AIMessage) -> AIMessage:
    """``message`` with its tool calls safe to serialise; the very same object when nothing changes."""
    update: dict[str, Any] = {}

    if message.tool_calls:
        calls: list[Any] = []
        changed = False
        for call in message.tool_calls:
            if isinstance(call, dict) and call.get("name") != normalize_name(call.get("name")):
                calls.append({**call, "name": normalize_name(call.get("name"))})
                changed = True
            else:
                calls.append(call)
        if changed:
            update["tool_calls"] = calls

    if message.invalid_tool_calls:
        invalid_calls: list[Any] = []
        changed = False
        for invalid in message.invalid_tool_calls:
            if not isinstance(invalid, dict):
                invalid_calls.append(invalid)
                continue
            name, args = normalize_name(invalid.get("name")), normalize_arguments(invalid.get("args"))
            if invalid.get("name") != name or invalid.get("args") != args:
                invalid_calls.append({**invalid, "name": name, "args": args})
                changed = True
            else:
                invalid_calls.append(invalid)
        if changed:
            update["invalid_tool_calls"] = invalid_calls

    kwargs = message.additional_kwargs or {}
    raw_calls = kwargs.get("tool_calls")
    if isinstance(raw_calls, list):
        sanitized_raw: list[Any] = []
        changed = False
        for raw in raw_calls:
            if not isinstance(raw, dict):
                sanitized_raw.append(raw)
                continue
            function = raw.get("function")
            if isinstance(function, dict):
                name, arguments = normalize_name(function.get("name")), normalize_arguments(function.get("arguments"))
                if function.get("name") != name or function.get("arguments") != arguments:
                    raw = {**raw, "function": {**function, "name": name, "arguments": arguments}}
                    changed = True
            elif raw.get("name") != normalize_name(raw.get("name")):
                raw = {**raw, "name": normalize_name(raw.get("name"))}
                changed = True
            sanitized_raw.append(raw)
        if changed:
            update["additional_kwargs"] = {**kwargs, "tool_calls": sanitized_raw}

    return message.model_copy(update=update) if update else message
