"""DeerFlow's human-input protocol: the ``human_input_request`` a clarification carries, and the hidden
``human_input_response`` HumanMessage a reply becomes (``H/agents/human_input.py``). The payload shapes are
a protocol shared with UIs: keep them exact."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import HumanMessage


class InvalidReplyError(ValueError):
    """A reply that does not answer the pending request; the message says why."""


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
        raise InvalidReplyError("this run is not waiting for input")
    if reply.request_id is not None and reply.request_id != request.get("request_id"):
        raise InvalidReplyError(
            f"stale request_id {reply.request_id!r}: the pending request is {request.get('request_id')!r}"
        )
    if reply.option_id is not None:
        ids = [option["id"] for option in request.get("options") or []]
        if reply.option_id not in ids:
            offered = ", ".join(ids) or "none"
            raise InvalidReplyError(f"unknown option {reply.option_id!r}; offered: {offered}")
    if reply.fields:
        names = {f["name"] for f in request.get("fields") or []}
        unknown = set(reply.fields) - names
        if unknown:
            raise InvalidReplyError(f"unknown field(s): {', '.join(sorted(unknown))}")
    if request.get("fields") and (reply.fields or reply.option_id is None):
        missing = [
            f["name"]
            for f in request["fields"]
            if f.get("required") and _blank(reply.fields.get(f["name"])) and _blank(reply.answer)
        ]
        if missing:
            raise InvalidReplyError(f"missing required field(s): {', '.join(missing)}")
    if reply.option_id is None and not reply.fields and _blank(reply.answer):
        raise InvalidReplyError("the answer is empty")


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip()) or value == []


def response_message(request: dict[str, Any], reply: Reply, *, message_id: str) -> HumanMessage:
    """The hidden HumanMessage DeerFlow's Human Input Card sends for ``reply``."""
    response: dict[str, Any] = {
        "version": 1,
        "kind": "human_input_response",
        "source": request.get("source", "ask_clarification"),
        "request_id": request.get("request_id"),
    }
    if reply.option_id is not None:
        option = next(o for o in request.get("options") or [] if o["id"] == reply.option_id)
        text = str(option["label"])
        response.update(response_kind="option", value=option["value"], option_id=reply.option_id)
    elif reply.fields:
        labels = {f["name"]: f.get("label") or f["name"] for f in request.get("fields") or []}
        text = "\n".join(f"{labels.get(name, name)}: {_render(value)}" for name, value in reply.fields.items())
        if reply.answer and reply.answer.strip():
            text = f"{reply.answer.strip()}\n{text}"
        response.update(response_kind="text", value=text)
    else:
        text = (reply.answer or "").strip()
        response.update(response_kind="text", value=text)
    return HumanMessage(
        content=text,
        id=message_id,
        additional_kwargs={"hide_from_ui": True, "human_input_response": response},
    )


def _render(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)
