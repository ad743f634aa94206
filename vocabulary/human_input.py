"""DeerFlow's human-input protocol: the ``human_input_request`` a clarification carries, and the hidden
``human_input_response`` HumanMessage a reply becomes (``bytedance/deer-flow:
backend/packages/harness/deerflow/agents/human_input.py`` and the web UI's ``bytedance/deer-flow:
frontend/src/core/messages/human-input.ts``). The payload shapes are a protocol shared with UIs: keep them exact.

A reply answers the pending request in one of three ways: an offered option (``option_id``), the form's
``fields`` (plus an optional free-text ``answer``), or a free-text ``answer``. :func:`validate_reply` checks
it against the request; :func:`response_message` turns it into the message DeerFlow's Human Input Card
sends: text ``For your clarification "{question}", my answer is: {value}``, where ``value`` is the
option's value, the typed answer, or the form summary ``Label: value; Label: value``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from langchain_core.messages import HumanMessage

FIELD_TYPES = frozenset({"text", "textarea", "number", "select", "multi_select", "checkbox", "date"})
OPTION_FIELD_TYPES = frozenset({"select", "multi_select"})

_TRUE = frozenset({"true", "yes", "y", "on", "1"})
_FALSE = frozenset({"false", "no", "n", "off", "0"})


class InvalidReplyError(ValueError):
    """A reply that does not answer the pending request; the message says why."""


class ReplyConflictError(InvalidReplyError):
    """A reply that came too late: the run is not waiting (another reply resumed it) or waits on a newer request.
    The API answers it with 409, like any request that lost a race for the thread."""


@dataclass
class Reply:
    """An answer to a pending request. At least one of ``answer``, ``option_id`` or ``fields`` is set."""

    answer: str | None = None
    option_id: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    request_id: str | None = None


def parse_reply(raw: Any) -> Reply:
    """Accept what a person can type in the Web UI's signal dialog: a bare string, or an object."""
    if isinstance(raw, Reply):
        return raw
    if isinstance(raw, str):
        return Reply(answer=raw)
    if not isinstance(raw, dict):
        raise InvalidReplyError(f"a reply is a string or an object, not {type(raw).__name__}")
    unknown = set(raw) - {"answer", "option_id", "fields", "request_id"}
    if unknown:
        raise InvalidReplyError(f"unknown reply key(s): {', '.join(sorted(unknown))}")
    for key in ("answer", "option_id", "request_id"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise InvalidReplyError(f"reply key {key!r} must be a string")
    fields = raw.get("fields") or {}
    if not isinstance(fields, dict):
        raise InvalidReplyError("reply key 'fields' must be an object of name → value")
    return Reply(raw.get("answer"), raw.get("option_id"), fields, raw.get("request_id"))


def validate_reply(request: dict[str, Any] | None, reply: Reply) -> None:
    """Raise :class:`InvalidReplyError` unless ``reply`` answers ``request``."""
    if request is None:
        raise ReplyConflictError("this run is not waiting for input")
    if reply.request_id is not None and reply.request_id != request.get("request_id"):
        raise ReplyConflictError(
            f"stale request_id {reply.request_id!r}: the pending request is {request.get('request_id')!r}"
        )
    if reply.option_id is not None:
        if reply.fields or not _blank(reply.answer):
            raise InvalidReplyError("choose an option or answer in your own words, not both")
        _option(request, reply.option_id)
        return
    if reply.fields:
        if not form_values(request, reply.fields) and _blank(reply.answer):
            raise InvalidReplyError("the answer is empty")
        return
    missing = [f["name"] for f in request.get("fields") or [] if f.get("required")]
    if missing:
        raise InvalidReplyError(f"missing required field(s): {', '.join(missing)}")
    if _blank(reply.answer):
        raise InvalidReplyError("the answer is empty")


def form_values(request: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """The form's answered values, normalised (option ids → values, ``"3"`` → 3, ``"yes"`` → True), in
    the form's field order; raises :class:`InvalidReplyError` on an unknown field, a value the field
    cannot take, or a required field left blank."""
    form = request.get("fields") or []
    unknown = set(values) - {f["name"] for f in form}
    if unknown:
        raise InvalidReplyError(f"unknown field(s): {', '.join(sorted(unknown))}")
    answered: dict[str, Any] = {}
    missing = []
    for spec in form:
        value = _coerce(spec, values.get(spec["name"]))
        if value is None:
            if spec.get("required"):
                missing.append(spec["name"])
            continue
        answered[spec["name"]] = value
    if missing:
        raise InvalidReplyError(f"missing required field(s): {', '.join(missing)}")
    return answered


def response_message(request: dict[str, Any], reply: Reply, *, message_id: str) -> HumanMessage:
    """The hidden HumanMessage DeerFlow's Human Input Card sends for ``reply`` (validated beforehand)."""
    response: dict[str, Any] = {
        "version": 1,
        "kind": "human_input_response",
        "source": request.get("source", "ask_clarification"),
        "request_id": request.get("request_id"),
    }
    if reply.option_id is not None:
        option = _option(request, reply.option_id)
        response.update(response_kind="option", value=option["value"], option_id=reply.option_id)
    else:
        # Forms answer with a readable summary, as DeerFlow's form card does: there is no "form" response kind.
        answered = form_values(request, reply.fields) if reply.fields else {}
        parts = [form_summary(request, answered)] if answered else []
        if not _blank(reply.answer):
            parts.append(str(reply.answer).strip())
        response.update(response_kind="text", value="; ".join(parts))
    text = f'For your clarification "{request.get("question", "")}", my answer is: {response["value"]}'
    return HumanMessage(
        content=text,
        id=message_id,
        additional_kwargs={"hide_from_ui": True, "human_input_response": response},
    )


def form_summary(request: dict[str, Any], answered: dict[str, Any]) -> str:
    """``Label: value; Label: value`` over the answered fields, in form order (DeerFlow's form summary)."""
    labels = {f["name"]: f.get("label") or f["name"] for f in request.get("fields") or []}
    return "; ".join(f"{labels[name]}: {_display(value)}" for name, value in answered.items())


def request_markdown(request: dict[str, Any]) -> list[str]:
    """Markdown lines describing a pending request, for the run's current details in the Web UI."""
    lines = []
    if request.get("context"):
        lines.append(f"_{request['context']}_")
    lines.append(f"**Waiting for an answer:** {request.get('question', '')}")
    for option in request.get("options") or []:
        lines.append(f"- `{option['id']}` {option['label']}")
    for spec in request.get("fields") or []:
        line = f"- field `{spec['name']}` ({spec['type']}{', required' if spec.get('required') else ''}): "
        line += spec.get("label") or spec["name"]
        if spec.get("options"):
            line += " — " + " / ".join(option["value"] for option in spec["options"])
        lines.append(line)
    lines.append(f"`request_id`: `{request.get('request_id')}`")
    return lines


def _option(request: dict[str, Any], option_id: str) -> dict[str, Any]:
    for option in request.get("options") or []:
        if option["id"] == option_id:
            return dict(option)
    offered = ", ".join(o["id"] for o in request.get("options") or []) or "none"
    raise InvalidReplyError(f"unknown option {option_id!r}; offered: {offered}")


def _coerce(spec: dict[str, Any], value: Any) -> Any:
    """``value`` as the field's type, ``None`` when blank; raises when the field cannot take it. Accepts the
    strings a command line or a signal dialog produces."""
    if _blank(value):
        return None
    name, kind = spec["name"], spec.get("type", "text")
    if kind == "checkbox":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE | _FALSE:
            return text in _TRUE
        raise InvalidReplyError(f"field {name!r} must be true or false, got {value!r}")
    if kind == "number":
        number = _number(value)
        if number is None:
            raise InvalidReplyError(f"field {name!r} must be a number, got {value!r}")
        return number
    if kind in OPTION_FIELD_TYPES:
        choices = [value] if kind == "select" else _as_list(value)
        picked = list(dict.fromkeys(_choice(spec, choice) for choice in choices))
        if kind == "select":
            return picked[0]
        return picked or None
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise InvalidReplyError(f"field {name!r} must be text, got {type(value).__name__}")
    text = str(value).strip()
    if kind == "date":
        try:
            date.fromisoformat(text)
        except ValueError:
            raise InvalidReplyError(f"field {name!r} must be a date (YYYY-MM-DD), got {value!r}") from None
    return text


def _choice(spec: dict[str, Any], choice: Any) -> str:
    text = str(choice).strip()
    for option in spec.get("options") or []:
        if text in (option["value"], option["id"], option["label"]):
            return str(option["value"])
    offered = ", ".join(option["value"] for option in spec.get("options") or [])
    raise InvalidReplyError(f"field {spec['name']!r}: {text!r} is not one of the offered options ({offered})")


def _as_list(value: Any) -> list[Any]:
    # A command line gives "a,b" for a multiple choice; a signal object may give a list.
    if isinstance(value, list):
        return value
    return [part for part in str(value).split(",") if part.strip()]


def _number(value: Any) -> int | float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number: int | float = value
    else:
        text = str(value).strip()
        try:
            number = int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                return None
    if isinstance(number, float):
        if not math.isfinite(number):
            return None
        if number.is_integer():
            return int(number)
    return number


def _display(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip()) or value == []
