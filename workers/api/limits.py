"""What the Agent Server accepts from outside, in one place: every JSON body, checkpoint ids and event ids.

Every request body model derives from :class:`ApiBody`, whose check runs on the parsed JSON before any field
is read, so a refused body is a 422 ``{"detail": one line}`` with nothing written. Why each bound exists:

* **Nesting depth** (:data:`MAX_JSON_DEPTH`): pydantic's serializer gives up on values nested a few hundred
  levels deep, so deeply nested metadata was stored and then every response that shows it (the thread, that
  user's ``POST /threads/search``) was a 500 from then on. Nothing a client sends needs more than a few levels.
* **Lone surrogates** (``"\\ud800"`` is valid JSON, but not Unicode text): such a string cannot be encoded as
  UTF-8, so storing it, echoing it in an error or handing it to Temporal raised deep inside the server.
* **Numeric ids** (:func:`version_number`, :func:`event_id`): ``str.isdigit`` and ``\\d`` accept digits
  ``int()`` refuses (``²``) or parses slowly and then refuses (more than 4,300 digits); ids here are ASCII
  digits, at most :data:`MAX_ID_DIGITS` of them.

The body size is bounded before the app runs (``api.max_body_bytes``, ``workers/api/auth.py``); upload names
by ``activities/uploads.py`` (shared with the CLI); a message or a reply by ``run.max_message_chars``.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

MAX_JSON_DEPTH = 32
"""Levels of objects and arrays any JSON body may nest (the body itself is level 1)."""
MAX_ID_DIGITS = 18
"""Digits of a checkpoint version or a stream offset: every such number fits in a signed 64-bit integer."""

_VERSION = re.compile(rf"v([0-9]{{1,{MAX_ID_DIGITS}}})", re.ASCII)
_EVENT_ID = re.compile(
    rf"(-?[0-9]{{1,{MAX_ID_DIGITS}}})(?:-([0-9]{{1,{MAX_ID_DIGITS}}})(?:\.([0-9]{{1,{MAX_ID_DIGITS}}})\.([0-9]{{1,{MAX_ID_DIGITS}}}))?)?",
    re.ASCII,
)


def json_problem(value: Any, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """Why a parsed JSON value is refused (too deep, or a string that is not Unicode text), or ``None``.

    Iterative, so no input can exhaust the stack of the check itself; the problem names the top-level key."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, str):
            if not _is_text(item):
                return f"{where or 'the body'}: a string holds a lone surrogate escape, which is not Unicode text"
            continue
        if not isinstance(item, (dict, list)):
            continue
        if depth > max_depth:
            return f"{where or 'the body'}: JSON nested deeper than {max_depth} levels"
        pairs = item.items() if isinstance(item, dict) else ((None, v) for v in item)
        for key, child in pairs:
            if key is not None and not _is_text(str(key)):
                return f"{where or 'the body'}: a key holds a lone surrogate escape, which is not Unicode text"
            stack.append((child, depth + 1, where or (str(key) if key is not None else "")))
    return None


def _is_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class ApiBody(BaseModel):
    """A request body: unknown fields are ignored (``langgraph-sdk`` sends some hartflow does not use), and the
    whole JSON value is checked by :func:`json_problem` before any field is."""

    model_config = ConfigDict(extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _within_limits(cls, data: Any) -> Any:
        problem = json_problem(data)
        if problem is not None:
            raise ValueError(problem)
        return data


def version_number(checkpoint_id: str) -> int | None:
    """The version a checkpoint id ``v{N}`` names, or ``None`` for anything else."""
    match = _VERSION.fullmatch(checkpoint_id)
    return None if match is None else int(match.group(1))


def event_id(text: str) -> tuple[int, ...] | None:
    """``{offset}-{n}`` (or ``{offset}``) as numbers, or ``None`` when ``text`` is not such an id. A live token
    frame's id goes on with ``.{attempt}.{index}`` (``workers/api/live_tokens.py``): four numbers."""
    match = _EVENT_ID.fullmatch(text)
    if match is None:
        return None
    point = (int(match.group(1)), int(match.group(2) or 0))
    return point if match.group(3) is None else (*point, int(match.group(3)), int(match.group(4)))
