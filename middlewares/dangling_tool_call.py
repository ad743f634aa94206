"""DanglingToolCall: the model request always carries a well-formed tool-call transcript.

Strict providers reject a request in which an assistant tool call has no result, a result has no call, or a
result is separated from its call. Such histories are real: a run cancelled mid-tool commits the AIMessage
without its results, summarisation can drop a call but keep its result, providers omit ids or names.

Hook
* ``wrap_model_call`` — request overlay only (``request.override(messages=…)``); thread state is never
  changed. Works on ``request.messages`` (not in ``before_model``) so repairs land right after the AIMessage
  they belong to instead of being appended at the end by the ``messages`` reducer:

  1. malformed (missing/blank) tool-call ids get ``deerflow_synthetic_tool_call_{msg_index}_{source}_{position}``
     (``source`` ∈ ``call``/``invalid``/``raw``); an id-less result is re-pointed at such an id only when the
     attribution is forced (one compatible call of its turn, or position when every malformed call of the
     turn has a result);
  2. tool-call ids are collected from ``tool_calls``, ``invalid_tool_calls`` and, only when both are empty
     (the view the OpenAI serializer falls back to), raw ``additional_kwargs["tool_calls"]``;
  3. the transcript is rebuilt: each AIMessage is followed by its results in call order (a queue per id, so
     ids reused across turns pair up), results without a call are dropped, and each unanswered call gets a
     synthetic ``ToolMessage(status="error")``;
  4. AIMessages are sanitised for serialisation: blank names become ``unknown_tool``, invalid-call args and raw
     ``function.arguments`` become a JSON-object string (else ``"{}"``).

  A valid transcript passes through untouched: the handler gets the very same request.

Writes: the request overlay only.
"""

from __future__ import annotations

import json
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from middlewares._logging import hook_logger
from middlewares.base import Middleware, ModelHandler, ModelRequest

logger = hook_logger(__name__)

UNKNOWN_TOOL_NAME = "unknown_tool"
SYNTHETIC_ID_PREFIX = "deerflow_synthetic_tool_call_"
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


class DanglingToolCallMiddleware(Middleware):
    def __init__(self) -> None:
        # Per-run memory (never exported): the last request that needed no repair. A request that extends it
        # only needs its new messages checked, which keeps a turn's cost independent of the thread's length.
        self._well_formed: list[BaseMessage] = []

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AIMessage:
        patched = self.repair(request.messages)
        if patched is not None:
            request = request.override(messages=patched)
        return await handler(request)

    def repair(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """:func:`patch_messages`, checking only what was appended to the last well-formed request.

        Sound because a well-formed prefix answers each of its calls with its own first matching result, so
        appending a suffix that is well-formed on its own (valid ids, each call answered right after it, no
        orphan) cannot change any pairing; anything else takes the full pass."""
        known = self._well_formed
        extends_known = bool(known) and len(messages) >= len(known) and all(
            previous is current for previous, current in zip(known, messages, strict=False)
        )
        suffix_only = extends_known and patch_messages(messages[len(known) :]) is None
        patched = None if suffix_only else patch_messages(messages)
        if patched is None:
            self._well_formed = list(messages)
        return patched


def patch_messages(messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
    """The repaired transcript, or ``None`` when ``messages`` is already well-formed."""
    normalized = _normalize_tool_call_ids(messages)

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
            if call.get("invalid_tool_name") and not _valid_text(result.name):
                result = result.model_copy(update={"name": call["name"]})
            patched.append(result)

    if not dropped and patched == list(messages):
        return None
    if dropped or injected:
        logger.warning(
            "DanglingToolCallMiddleware: %d orphan(s) dropped, %d placeholder(s) injected", dropped, injected
        )
    return patched


# -- names, ids, arguments -------------------------------------------------------------------------------


def _valid_text(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _normalize_name(name: object) -> str:
    return name.strip() if isinstance(name, str) and name.strip() else UNKNOWN_TOOL_NAME


def _declared_name(call: dict[str, Any]) -> object:
    """A call's name, falling back to the raw payload's ``function.name``."""
    name = call.get("name")
    if _valid_text(name):
        return name
    function = call.get("function")
    return function.get("name") if isinstance(function, dict) else name


def _names_can_pair(call_name: object, result_name: object) -> bool:
    """Only two usable names that differ rule a pairing out; a missing name contradicts nothing."""
    if not isinstance(call_name, str) or not isinstance(result_name, str):
        return True
    if not call_name.strip() or not result_name.strip():
        return True
    return call_name.strip() == result_name.strip()


def _parse_json_object(value: object) -> dict[str, Any] | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _normalize_arguments(arguments: object) -> str:
    """A JSON-object string an OpenAI-compatible provider accepts on replay."""
    if isinstance(arguments, dict):
        try:
            return json.dumps(arguments, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError):
            return "{}"
    return arguments if isinstance(arguments, str) and _parse_json_object(arguments) is not None else "{}"


# -- step 1: malformed ids -------------------------------------------------------------------------------


def _relabel(calls: Sequence[Any], msg_index: int, source: str) -> tuple[list[Any], list[dict[str, Any]]]:
    """``calls`` with malformed ids replaced by position-derived synthetic ids, plus one claim per relabel.

    Deriving the id from the call's position lets the pairing pass and the model-bound message agree on it
    without sharing state.
    """
    relabeled: list[Any] = []
    claims: list[dict[str, Any]] = []
    for position, call in enumerate(calls):
        if not isinstance(call, dict) or _valid_text(call.get("id")):
            relabeled.append(call)
            continue
        synthetic = f"{SYNTHETIC_ID_PREFIX}{msg_index}_{source}_{position}"
        relabeled.append({**call, "id": synthetic})
        claims.append({"original": call.get("id"), "synthetic": synthetic, "name": _declared_name(call)})
    return relabeled, claims


def _malformed_results_of_turn(messages: Sequence[BaseMessage], start: int) -> int:
    count = 0
    for message in messages[start + 1 :]:
        if isinstance(message, AIMessage):
            break
        if isinstance(message, ToolMessage) and not _valid_text(message.tool_call_id):
            count += 1
    return count


def _claim(open_calls: list[dict[str, Any]], result: ToolMessage, positional: bool) -> str | None:
    """The synthetic id of the open malformed call ``result`` answers, when the choice is forced.

    One compatible call is identified by its name (or by being the only one). Several compatible calls are
    told apart by position only while every malformed call of the turn has a result: results are built in
    call order, but a missing result means a call was interrupted and the rest may no longer line up.
    Unattributable results stay malformed and are dropped as orphans — better than inventing a pairing.
    """
    candidates = [
        i
        for i, entry in enumerate(open_calls)
        if entry["original"] == result.tool_call_id and _names_can_pair(entry["name"], result.name)
    ]
    if not candidates or (len(candidates) > 1 and not positional):
        return None
    synthetic: str = open_calls.pop(candidates[0])["synthetic"]
    return synthetic


def _normalize_tool_call_ids(messages: Sequence[BaseMessage]) -> Sequence[BaseMessage]:
    rewritten: dict[int, BaseMessage] = {}
    # Malformed calls of the latest AIMessage still unanswered: a result only answers the turn that issued
    # it, so an earlier dangling call must never consume a later turn's result.
    open_calls: list[dict[str, Any]] = []
    positional = False
    for index, message in enumerate(messages):
        if isinstance(message, AIMessage):
            update: dict[str, Any] = {}
            claims: list[dict[str, Any]] = []
            kwargs = message.additional_kwargs or {}
            raw = kwargs.get("tool_calls")
            sources: list[tuple[str, Sequence[Any], str]] = [
                ("call", message.tool_calls or [], "tool_calls"),
                ("invalid", message.invalid_tool_calls or [], "invalid_tool_calls"),
            ]
            # The raw payload is what gets serialised only when both structured views are empty; minting an
            # id for a shadowed raw view would owe a result to a call the provider never sees.
            if not message.tool_calls and not message.invalid_tool_calls and isinstance(raw, list):
                sources.append(("raw", raw, "additional_kwargs"))
            for source, calls, field in sources:
                relabeled, source_claims = _relabel(calls, index, source)
                if not source_claims:
                    continue
                claims.extend(source_claims)
                update[field] = {**kwargs, "tool_calls": relabeled} if field == "additional_kwargs" else relabeled
            open_calls = claims
            positional = _malformed_results_of_turn(messages, index) == len(claims)
            if update:
                rewritten[index] = message.model_copy(update=update)
        elif isinstance(message, ToolMessage) and not _valid_text(message.tool_call_id):
            synthetic = _claim(open_calls, message, positional)
            if synthetic is not None:
                rewritten[index] = message.model_copy(update={"tool_call_id": synthetic})
    if not rewritten:
        return messages
    return [rewritten.get(index, message) for index, message in enumerate(messages)]


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
        entry: dict[str, Any] = {**call, "name": _normalize_name(call.get("name"))}
        if not _valid_text(call.get("name")):
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
                args = _parse_json_object(function.get("arguments")) or {}
            entry = {"id": raw.get("id"), "name": _normalize_name(name), "args": args if isinstance(args, dict) else {}}
            if not _valid_text(name):
                entry["invalid_tool_name"] = True
            calls.append(entry)

    for invalid in message.invalid_tool_calls or []:
        if not isinstance(invalid, dict):
            continue
        entry = {
            "id": invalid.get("id"),
            "name": _normalize_name(invalid.get("name")),
            "args": {},
            "invalid": True,
            "error": invalid.get("error"),
        }
        if not _valid_text(invalid.get("name")):
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
    name = _normalize_name(call.get("name"))
    entry = {
        "name": name,
        "invalid": True,
        "error": call.get("error"),
        "invalid_tool_name": not _valid_text(call.get("name")),
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
            if isinstance(call, dict) and call.get("name") != _normalize_name(call.get("name")):
                calls.append({**call, "name": _normalize_name(call.get("name"))})
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
            name, args = _normalize_name(invalid.get("name")), _normalize_arguments(invalid.get("args"))
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
                name, arguments = _normalize_name(function.get("name")), _normalize_arguments(function.get("arguments"))
                if function.get("name") != name or function.get("arguments") != arguments:
                    raw = {**raw, "function": {**function, "name": name, "arguments": arguments}}
                    changed = True
            elif raw.get("name") != _normalize_name(raw.get("name")):
                raw = {**raw, "name": _normalize_name(raw.get("name"))}
                changed = True
            sanitized_raw.append(raw)
        if changed:
            update["additional_kwargs"] = {**kwargs, "tool_calls": sanitized_raw}

    return message.model_copy(update=update) if update else message
