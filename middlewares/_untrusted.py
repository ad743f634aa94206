"""Neutralising untrusted text before it enters the model context as data (DeerFlow's
``neutralize_untrusted_tags``, the primitive InputSanitization, ToolResultSanitization and Uploads share).

Two structural defences and nothing else: the framework's own authority tags (and common injection tags)
are HTML-escaped so a filename or a fetched page cannot open a ``<current_uploads>`` or ``<system>`` block
of its own, and the plain-text user-input boundary markers are replaced by inert look-alikes.
"""

from __future__ import annotations

import re

BLOCKED_TAG_NAMES = frozenset(
    {
        # Blocks the framework itself renders into model input.
        "system-reminder", "system_reminder", "memory", "current_date", "think", "analysis", "role", "soul",
        "self_update", "thinking_style", "clarification_system", "critical_reminders", "response_style",
        "citations", "subagent_system", "skill_system",
        "uploaded_files", "current_uploads", "skill_index", "available_skills", "disabled_skills",
        "memory_tool_system", "todo_list_system", "durable_context_data", "slash_skill_activation",
        "mcp_routing_hints", "available-deferred-tools", "goal_continuation", "background_task_event",
        "file_editing_workflow",
        "guidelines", "output_format", "working_directory", "tool_restrictions",
        # Common prompt-injection tags.
        "system", "instruction", "important", "override", "ignore", "prompt",
    }
)  # fmt: skip

USER_INPUT_BEGIN = "--- BEGIN USER INPUT ---"
USER_INPUT_END = "--- END USER INPUT ---"
NEUTRALIZED_BEGIN = "[BEGIN USER INPUT]"
NEUTRALIZED_END = "[END USER INPUT]"

# <tag>, </tag>, <tag attrs>, <tag/> and an unterminated "<tag", in any case.
_BLOCKED_TAG = re.compile(
    r"<\s*/?\s*(?:" + "|".join(re.escape(tag) for tag in sorted(BLOCKED_TAG_NAMES)) + r")\b[^>]*>?",
    re.IGNORECASE,
)
_BOUNDARY = re.compile(f"{re.escape(USER_INPUT_BEGIN)}|{re.escape(USER_INPUT_END)}")


def neutralize_untrusted_tags(text: str) -> str:
    """Escape blocked tags and neutralise boundary markers; blank text is returned as it is."""
    if not text.strip():
        return text
    return _neutralize_boundaries(_escape_blocked_tags(text))


def frame_untrusted_text(text: str) -> str:
    """The user message's framing (DeerFlow's ``frame_untrusted_text``): blocked tags escaped, then the text wrapped
    in ``--- BEGIN/END USER INPUT ---`` with any markers inside it neutralised. Blank text is returned as it is;
    text already wrapped exactly (prefix and suffix) keeps its wrapping, its inner markers still neutralised."""
    if not text.strip():
        return text
    text = _escape_blocked_tags(text)
    if text.startswith(USER_INPUT_BEGIN) and text.endswith(USER_INPUT_END):
        inner = text[len(USER_INPUT_BEGIN) : -len(USER_INPUT_END)]
        return f"{USER_INPUT_BEGIN}{_neutralize_boundaries(inner)}{USER_INPUT_END}"
    return f"{USER_INPUT_BEGIN}\n{_neutralize_boundaries(text)}\n{USER_INPUT_END}"


def _escape_blocked_tags(text: str) -> str:
    return _BLOCKED_TAG.sub(lambda m: m.group(0).replace("<", "&lt;").replace(">", "&gt;"), text)


def _neutralize_boundaries(text: str) -> str:
    return _BOUNDARY.sub(lambda m: NEUTRALIZED_BEGIN if m.group(0) == USER_INPUT_BEGIN else NEUTRALIZED_END, text)
