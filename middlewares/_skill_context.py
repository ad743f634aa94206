"""Skill files the model has read, as DeerFlow keeps them (``bytedance/deer-flow:
backend/packages/harness/deerflow/agents/middlewares/skill_context.py``).

ToolErrorHandling stamps a successful read of a ``SKILL.md`` under the skills root with
``additional_kwargs["skill_context_entry"]`` (its normalised path and front-matter description); DurableContext
pairs those results with the read calls that asked for the same path into ``skill_context`` entries (thread state),
renders them for the model, and SkillToolPolicy applies the skills' ``allowed-tools`` once they are there.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Collection, Mapping, Sequence
from html import escape
from typing import Any

import yaml
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from middlewares._skill_reads import tool_call_path
from vocabulary.messages import AppendedMessages

SKILL_CONTEXT_ENTRY_KEY = "skill_context_entry"
SKILL_FILE_NAME = "SKILL.md"
SKILL_DESCRIPTION_MAX_CHARS = 500
_FRONT_MATTER = re.compile(r"^---\s*\n(.*?)\n---\s*\n", re.DOTALL)


def _under_root(path: str, root: str) -> str | None:
    normalized, normalized_root = posixpath.normpath(path), posixpath.normpath(root.rstrip("/") or "/")
    if normalized == normalized_root or normalized.startswith(normalized_root + "/"):
        return normalized
    return None


def _one_line(text: str) -> str:
    return " ".join(text.split())[:SKILL_DESCRIPTION_MAX_CHARS]


def _description(content: str) -> str:
    match = _FRONT_MATTER.match(content)
    if not match:
        return ""
    try:
        metadata = yaml.safe_load(match.group(1))
    except yaml.YAMLError:
        return ""
    description = metadata.get("description") if isinstance(metadata, dict) else None
    return _one_line(description) if isinstance(description, str) else ""


def entry_from_read(path: str, content: str, *, skills_root: str) -> dict[str, str] | None:
    """The stamp for a read of ``path`` that returned ``content``: ``None`` unless it is a SKILL.md under the
    root and the read did not fail."""
    normalized = _under_root(path, skills_root)
    if normalized is None or posixpath.basename(normalized) != SKILL_FILE_NAME or content.lstrip().startswith("Error:"):
        return None
    return {"path": normalized, "description": _description(content)}


def stamp_skill_read(message: ToolMessage, tool_call: Mapping[str, Any], *, skills_root: str) -> ToolMessage:
    """``message`` with its skill stamp, when it answers a successful SKILL.md read."""
    path = tool_call_path(tool_call)
    if message.status == "error" or not isinstance(message.content, str) or path is None:
        return message
    entry = entry_from_read(path, message.content, skills_root=skills_root)
    if entry is None:
        return message
    kwargs = {**(message.additional_kwargs or {}), SKILL_CONTEXT_ENTRY_KEY: entry}
    return message.model_copy(update={"additional_kwargs": kwargs})


class SkillReads:
    """One run's ``skill_context`` entries: every stamped SKILL.md read answering a read call of the same path.
    While the conversation only grows (:class:`vocabulary.messages.AppendedMessages`) it reads the new messages
    alone, keeping every read call's path and every stamped result, so a turn's work does not grow with the
    conversation; otherwise (a summary replaced messages) it reads them all again. The entries are those of a whole
    scan: a call may come after its result, and a later call with the same id wins."""

    def __init__(self, *, skills_root: str, read_tool_names: Collection[str]) -> None:
        self._skills_root = skills_root
        self._read_tool_names = frozenset(read_tool_names)
        self._appended = AppendedMessages()
        self._paths_by_call: dict[str, str] = {}
        self._stamped: list[tuple[int, ToolMessage, Mapping[str, Any]]] = []
        """Successful tool results with a skill stamp: (index in the conversation, result, stamp)."""

    def capture(self, messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
        start = self._appended.start(messages)
        if start == 0:
            self._paths_by_call, self._stamped = {}, []
        for index in range(start, len(messages)):
            self._take(index, messages[index])
        entries: list[dict[str, Any]] = []
        for index, message, stamp in self._stamped:
            expected = self._paths_by_call.get(str(message.tool_call_id))
            if expected is None or stamp.get("path") != expected:
                continue
            description = stamp.get("description")
            entries.append(
                {
                    "name": posixpath.basename(posixpath.dirname(expected)),
                    "path": expected,
                    "description": _one_line(description) if isinstance(description, str) else "",
                    "loaded_at": index,
                }
            )
        return entries

    def _take(self, index: int, message: BaseMessage) -> None:
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                raw = tool_call_path(call)
                path = _under_root(raw, self._skills_root) if raw else None
                if (
                    call.get("name") in self._read_tool_names
                    and call.get("id")
                    and path
                    and path.endswith(f"/{SKILL_FILE_NAME}")
                ):
                    self._paths_by_call[str(call["id"])] = path
        elif isinstance(message, ToolMessage) and message.status != "error":
            stamp = (message.additional_kwargs or {}).get(SKILL_CONTEXT_ENTRY_KEY)
            if isinstance(stamp, Mapping):
                self._stamped.append((index, message, stamp))


def render_skill_context(entries: Sequence[Mapping[str, Any]]) -> str:
    """DeerFlow's reminder of the active skills: references, never the bodies."""
    if not entries:
        return ""
    lines = ["## Active skills (loaded earlier - re-read the file before applying its instructions)"]
    for entry in entries:
        name, path = escape(str(entry["name"]), quote=False), escape(str(entry["path"]), quote=False)
        description = escape(_one_line(str(entry.get("description") or "")), quote=False)
        lines.append(f"- {name}{f': {description}' if description else ''} -> {path}")
    return "\n".join(lines)
