"""Reading a script file (the format: ``activities/models/script.py``): the whole file is parsed and every entry
validated up front, so a bad script fails before the run starts, with one line naming the file, the entry and the
problem, worded for someone editing the JSON by hand; the entries are then grouped into each purpose's calls.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from activities.models.script import CallGroup, Entry, ErrorEntry, ResponseEntry, Script
from vocabulary.contracts import ModelPurpose

__all__ = ["ScriptError", "load_script"]


class ScriptError(ValueError):
    """A script file that is missing or malformed; the message is one line naming the file and entry."""


def _group(entries: Sequence[Entry]) -> dict[ModelPurpose, tuple[CallGroup, ...]]:
    calls: dict[ModelPurpose, list[CallGroup]] = {}
    pending: dict[ModelPurpose, list[ErrorEntry]] = {}
    for entry in entries:
        errors = pending.setdefault(entry.purpose, [])
        if isinstance(entry, ErrorEntry):
            errors.append(entry)
        else:
            calls.setdefault(entry.purpose, []).append(CallGroup(errors=tuple(errors), response=entry))
            errors.clear()
    for purpose, errors in pending.items():
        if errors:
            calls.setdefault(purpose, []).append(CallGroup(errors=tuple(errors), response=None))
    return {purpose: tuple(groups) for purpose, groups in calls.items()}


def _where(loc: Sequence[int | str]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def _describe(err: ErrorDetails) -> str:
    """One pydantic error as ``<location>: <problem>``, worded for someone editing the JSON by hand."""
    loc = list(err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"{_where(loc[:-1])}: unknown key {loc[-1]!r}"
    if kind == "missing":
        return f"{_where(loc[:-1])}: missing key {loc[-1]!r}"
    if kind == "value_error":
        return f"{_where(loc)}: {err.get('ctx', {}).get('error', err['msg'])}"
    problem = {
        "dict_type": "must be an object",
        "model_type": "must be an object",
        "list_type": "must be a list",
    }.get(kind, err["msg"])
    got = repr(err["input"])
    return f"{_where(loc)}: {problem} (got {got if len(got) <= 60 else got[:57] + '...'})"


def load_script(path: str | Path) -> Script:
    """Parse and validate a whole script file up front, so a bad script fails before the run starts."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScriptError(f"cannot read script {path}: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ScriptError(f"invalid script {path}: not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ScriptError(f"invalid script {path}: the top level must be an object with a 'responses' list")
    unknown = sorted(set(raw) - {"responses"})
    if unknown:
        raise ScriptError(f"invalid script {path}: unknown top-level key {unknown[0]!r}")
    if "responses" not in raw:
        raise ScriptError(f"invalid script {path}: missing key 'responses'")
    responses = raw["responses"]
    if not isinstance(responses, list):
        raise ScriptError(f"invalid script {path}: 'responses' must be a list")

    entries: list[Entry] = []
    for index, item in enumerate(responses):
        where = f"responses[{index}]"
        if not isinstance(item, dict):
            raise ScriptError(f"invalid script {path}: {where}: an entry must be an object")
        model: type[Entry] = ErrorEntry if "error" in item else ResponseEntry
        try:
            entries.append(model.model_validate(item))
        except ValidationError as exc:
            raise ScriptError(f"invalid script {path}: {where}{_describe(exc.errors()[0])}") from exc
    return Script(path=path, calls=_group(entries))
