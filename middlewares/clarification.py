"""Clarification: ``ask_clarification`` pauses the run until a person answers.

Hooks
* ``wrap_tool_call`` (innermost, so every other guard has already run): intercepts ``ask_clarification`` and
  never executes it. Returns a :class:`Command` whose update appends the clarification ToolMessage
  (**thread state**: ``id="clarification:{tool_call_id}"``, the text fallback as content, the
  ``human_input_request`` payload as ``artifact.human_input``) and whose ``interrupt`` carries the payload.
  The run workflow (``workflows/run/workflow.py``) runs the turn's other tool calls, commits the state, pauses with
  status ``awaiting_input`` and, on a reply, appends the hidden ``human_input_response`` HumanMessage and
  calls the model again: the same run continues (the pause is the **side effect**).
* In ``non_interactive`` runs it returns DeerFlow's "Clarification is disabled" ToolMessage and the loop goes on.

The request follows DeerFlow's ``ClarificationMiddleware`` to the byte, because UIs parse it:

* ``options`` are normalised (a JSON string is decoded, dicts flattened to their scalar leaves, XML tags
  stripped, trimmed, blanks and duplicates dropped);
* ``fields`` become a v2 form only if the whole list is sound — at most 16 fields, names present, unique,
  not a JavaScript prototype member, every text at most 200 characters, at most 24 options per field,
  at most 16 KiB serialised. Any violation drops the form (the request degrades to options or free text);
  benign problems are fixed in place: an unknown type or an option-less select becomes ``text``,
  ``required`` accepts ``"true"`` and 1;
* the text fallback starts with an icon per ``clarification_type`` and lists the form fields (or options).

Per-run memory: none. Settings: ``run.non_interactive`` and ``run.clarification_timeout_seconds``.

Parts: the request and reply protocol ``vocabulary/human_input.py`` and the tool's schema in ``vocabulary/tools.py``
and ``vocabulary/tool_args.py``; the pause in ``workflows/run/pause.py``, its ``reply`` update and
``clarification_reply`` signal on ``workflows/run/workflow.py``; on the client side ``workers/client/runs.py``
(``Runs.reply``), the API's ``command.resume`` (``workers/api/replying.py``) and pending interrupt
(``workers/api/threads.py``), and ``hartflow reply`` (``workers/cli/runs.py``). Tests:
``tests/test_clarification.py``, ``tests/test_clarification_durability.py``, ``tests/test_validators_fuzz.py``.
"""

from __future__ import annotations

import json
import re
from hashlib import sha256
from typing import Any

from langchain_core.messages import ToolMessage

from middlewares.base import Command, Middleware, ToolCallRequest, ToolHandler, ToolResult
from vocabulary.human_input import FIELD_TYPES, OPTION_FIELD_TYPES

TOOL_NAME = "ask_clarification"

DISABLED_TEXT = (
    "Clarification is disabled in this context — the human is not present to answer synchronously. "
    "Do not ask for confirmation. Proceed with your best judgment, carry out the requested action, "
    "and state any assumptions you made in your final response."
)
FORM_FOOTER = "Please reply with a value for each field."

ICONS = {
    "missing_info": "❓",
    "ambiguous_requirement": "🤔",
    "approach_choice": "🔀",
    "risk_confirmation": "⚠️",
    "suggestion": "💡",
}

MAX_FORM_FIELDS = 16
MAX_FIELD_OPTIONS = 24
MAX_FIELD_TEXT_CHARS = 200
MAX_FORM_SERIALIZED_BYTES = 16_384

# Names a UI that keeps form values in a plain JavaScript object would read from Object.prototype.
RESERVED_FIELD_NAMES = frozenset(
    {
        "__proto__",
        "constructor",
        "prototype",
        "toString",
        "toLocaleString",
        "valueOf",
        "hasOwnProperty",
        "isPrototypeOf",
        "propertyIsEnumerable",
        "__defineGetter__",
        "__defineSetter__",
        "__lookupGetter__",
        "__lookupSetter__",
    }
)

_XML_TAG = re.compile(r"</?[A-Za-z_][\w:.-]*(?:\s[^<>]*?)?\s*/?>")


class ClarificationMiddleware(Middleware):
    def __init__(self, *, non_interactive: bool = False):
        self.non_interactive = non_interactive

    async def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolResult:
        if request.name != TOOL_NAME:
            return await handler(request)
        call_id = request.call_id
        if self.non_interactive:
            return ToolMessage(
                DISABLED_TEXT,
                id=request_id_for(call_id, "proceed-without-clarification"),
                tool_call_id=call_id,
                name=TOOL_NAME,
            )
        args = request.args if isinstance(request.args, dict) else {}
        fields = normalize_fields(args.get("fields"))
        text = format_text(args, fields)
        payload = build_request(args, fields, request_id=request_id_for(call_id, text), tool_call_id=call_id)
        message = ToolMessage(
            text,
            id=payload["request_id"],
            tool_call_id=call_id,
            name=TOOL_NAME,
            artifact={"human_input": payload},
        )
        return Command(update={"messages": [message]}, interrupt=payload)


def request_id_for(tool_call_id: str, text: str) -> str:
    """Stable, so a retried call replaces its ToolMessage instead of appending a second one."""
    if tool_call_id:
        return f"clarification:{tool_call_id}"
    return f"clarification:{sha256(text.encode('utf-8')).hexdigest()[:16]}"


def build_request(
    args: dict[str, Any], fields: list[dict[str, Any]], *, request_id: str, tool_call_id: str
) -> dict[str, Any]:
    """The ``human_input_request`` payload: v2 with a form, v1 (choices or free text) otherwise."""
    options = normalize_options(args.get("options", []))
    if fields:
        version, mode = 2, "form"
    elif options:
        version, mode = 1, "choice_with_other"
    else:
        version, mode = 1, "free_text"
    payload: dict[str, Any] = {
        "version": version,
        "kind": "human_input_request",
        "source": TOOL_NAME,
        "request_id": request_id,
        "clarification_type": str(args.get("clarification_type", "missing_info")),
        "question": str(args.get("question") or ""),
        "input_mode": mode,
    }
    if tool_call_id:
        payload["tool_call_id"] = tool_call_id
    if "context" in args:
        payload["context"] = None if args["context"] is None else str(args["context"])
    if fields:
        payload["fields"] = fields
    elif options:
        payload["options"] = [
            {"id": f"option-{i}", "label": option, "value": option} for i, option in enumerate(options, 1)
        ]
    return payload


def format_text(args: dict[str, Any], fields: list[dict[str, Any]]) -> str:
    """The text fallback: what UIs without cards show, and what the model sees as the tool result."""
    question = args.get("question", "")
    icon = ICONS.get(str(args.get("clarification_type", "missing_info")), "❓")
    context = args.get("context")
    parts = [f"{icon} {context}", f"\n{question}"] if context else [f"{icon} {question}"]
    if fields:
        parts.append("")
        for i, field in enumerate(fields, 1):
            line = f"  {i}. {field['label']}"
            if field["required"]:
                line += " (required)"
            if field.get("options"):
                line += " — options: " + " / ".join(option["label"] for option in field["options"])
                if field["type"] == "multi_select":
                    line += " (multiple allowed)"
            parts.append(line)
        parts += ["", FORM_FOOTER]
    else:
        options = normalize_options(args.get("options", []))
        if options:
            parts.append("")
            parts += [f"  {i}. {option}" for i, option in enumerate(options, 1)]
    return "\n".join(parts)


def normalize_options(raw: Any) -> list[str]:
    """Displayable option labels: a JSON-string list is decoded (some models send one), dicts are flattened,
    XML tags stripped, labels trimmed, blanks and duplicates dropped (UIs reject blank labels)."""
    options = raw
    if isinstance(options, str):
        try:
            options = json.loads(options)
        except ValueError:
            options = [options]
    if options is None:
        return []
    if isinstance(options, dict):
        options = _scalar_leaves(options)
    elif not isinstance(options, list):
        options = [options]
    labels = (_XML_TAG.sub("", str(option)).strip() for option in options)
    return list(dict.fromkeys(label for label in labels if label))


def _scalar_leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _scalar_leaves(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _scalar_leaves(item)]
    return [value] if isinstance(value, str | int | float) else []


def normalize_fields(raw: Any) -> list[dict[str, Any]]:
    """The v2 form fields, or ``[]`` when the form is unsound: validation is atomic, so a card can never look
    complete while silently missing a required field."""
    fields = raw
    if isinstance(fields, str):
        try:
            fields = json.loads(fields)
        except ValueError:
            return []
    if not isinstance(fields, list) or len(fields) > MAX_FORM_FIELDS:
        return []
    normalized: list[dict[str, Any]] = []
    seen: set[str] = set()
    for entry in fields:
        field = _normalize_field(entry, seen)
        if field is None:
            return []
        normalized.append(field)
    if len(json.dumps(normalized, ensure_ascii=False).encode("utf-8")) > MAX_FORM_SERIALIZED_BYTES:
        return []
    return normalized


def _normalize_field(entry: Any, seen: set[str]) -> dict[str, Any] | None:
    if not isinstance(entry, dict):
        return None
    raw_name = entry.get("name")
    if not isinstance(raw_name, str) or not raw_name.strip():
        return None
    name = raw_name.strip()
    if name in RESERVED_FIELD_NAMES or name in seen or len(name) > MAX_FIELD_TEXT_CHARS:
        return None
    seen.add(name)

    raw_label = entry.get("label")
    label = raw_label.strip() if isinstance(raw_label, str) and raw_label.strip() else name
    if len(label) > MAX_FIELD_TEXT_CHARS:
        return None

    # ``type: []`` is legal JSON from a model: test the type before the (hashing) membership check.
    field_type = entry.get("type")
    if not isinstance(field_type, str) or field_type not in FIELD_TYPES:
        field_type = "text"
    options = normalize_options(entry.get("options")) if field_type in OPTION_FIELD_TYPES else []
    if len(options) > MAX_FIELD_OPTIONS or any(len(option) > MAX_FIELD_TEXT_CHARS for option in options):
        return None
    if field_type in OPTION_FIELD_TYPES and not options:
        field_type = "text"

    field: dict[str, Any] = {
        "name": name,
        "label": label,
        "type": field_type,
        "required": _boolean(entry.get("required")),
    }
    if field_type in OPTION_FIELD_TYPES:
        field["options"] = [
            {"id": f"{name}-option-{i}", "label": option, "value": option} for i, option in enumerate(options, 1)
        ]
    placeholder = entry.get("placeholder")
    if isinstance(placeholder, str) and placeholder.strip():
        if len(placeholder.strip()) > MAX_FIELD_TEXT_CHARS:
            return None
        field["placeholder"] = placeholder.strip()
    return field


def _boolean(raw: Any) -> bool:
    """Some models send booleans as strings or 1/0."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int | float):
        return bool(raw)
    if isinstance(raw, str):
        return raw.strip().lower() == "true"
    return False
