"""DanglingToolCall's first step, pure: tool-call names, ids and arguments as providers send them, normalised,
and malformed (missing or blank) tool-call ids relabelled with position-derived synthetic ids.

Used by ``middlewares/_transcript_repair.py``; tested in ``tests/test_tool_call_ids.py`` (and, end to end,
``tests/test_dangling_tool_call.py``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

UNKNOWN_TOOL_NAME = "unknown_tool"
SYNTHETIC_ID_PREFIX = "deerflow_synthetic_tool_call_"


# -- names, ids, arguments -------------------------------------------------------------------------------


def valid_text(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def normalize_name(name: object) -> str:
    return name.strip() if isinstance(name, str) and name.strip() else UNKNOWN_TOOL_NAME


def _declared_name(call: dict[str, Any]) -> object:
    """A call's name, falling back to the raw payload's ``function.name``."""
    name = call.get("name")
    if valid_text(name):
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


def parse_json_object(value: object) -> dict[str, Any] | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def normalize_arguments(arguments: object) -> str:
    """A JSON-object string an OpenAI-compatible provider accepts on replay."""
    if isinstance(arguments, dict):
        try:
            return json.dumps(arguments, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError):
            return "{}"
    return arguments if isinstance(arguments, str) and parse_json_object(arguments) is not None else "{}"


# -- step 1: malformed ids -------------------------------------------------------------------------------


def _relabel(calls: Sequence[Any], msg_index: int, source: str) -> tuple[list[Any], list[dict[str, Any]]]:
    """``calls`` with malformed ids replaced by position-derived synthetic ids, plus one claim per relabel.

    Deriving the id from the call's position lets the pairing pass and the model-bound message agree on it
    without sharing state.
    """
    relabeled: list[Any] = []
    claims: list[dict[str, Any]] = []
    for position, call in enumerate(calls):
        if not isinstance(call, dict) or valid_text(call.get("id")):
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
        if isinstance(message, ToolMessage) and not valid_text(message.tool_call_id):
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


def normalize_tool_call_ids(messages: Sequence[BaseMessage]) -> Sequence[BaseMessage]:
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
        elif isinstance(message, ToolMessage) and not valid_text(message.tool_call_id):
            synthetic = _claim(open_calls, message, positional)
            if synthetic is not None:
                rewritten[index] = message.model_copy(update={"tool_call_id": synthetic})
    if not rewritten:
        return messages
    return [rewritten.get(index, message) for index, message in enumerate(messages)]
