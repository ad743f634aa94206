"""DeerFlow's addition to summarization: the most recent skill-file reads (a read tool's call on a path under the
skills container, and its result) survive a compaction verbatim, within the config's count and token budgets
(``middlewares/_summarization_config.py``), instead of being summarised. Used by the compaction plan
(``middlewares/_compaction.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, ToolMessage

from middlewares._summarization_config import SummarizationConfig, count_tokens
from middlewares._tool_calls import clone_with_tool_calls

_SKILL_PATH_ARGS = ("path", "file_path", "filepath")


@dataclass(frozen=True)
class _SkillBundle:
    """The skill-file reads of one AIMessage and their ToolMessages."""

    ai_index: int
    tool_indices: tuple[int, ...]
    call_ids: frozenset[str]
    tokens: int
    key: str


def tool_call_path(call: Mapping[str, Any]) -> str | None:
    """The file a tool call names (``path``, ``file_path`` or ``filepath``), if it names one."""
    args = call.get("args") or {}
    if not isinstance(args, dict):
        return None
    for key in _SKILL_PATH_ARGS:
        value = args.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _is_skill_read(call: Mapping[str, Any], config: SummarizationConfig) -> bool:
    if call.get("name") not in config.skill_file_read_tool_names:
        return False
    path, root = tool_call_path(call), config.skills_container_path.rstrip("/")
    return path is not None and (path == root or path.startswith(root + "/"))


def _skill_bundles(messages: Sequence[BaseMessage], config: SummarizationConfig) -> list[_SkillBundle]:
    bundles: list[_SkillBundle] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        if not (isinstance(message, AIMessage) and message.tool_calls):
            i += 1
            continue
        paths = {
            str(call["id"]): cast(str, tool_call_path(call))
            for call in message.tool_calls
            if call.get("id") and _is_skill_read(call, config)
        }
        end = i + 1
        while end < len(messages) and isinstance(messages[end], ToolMessage):
            end += 1
        results = [k for k in range(i + 1, end) if cast(ToolMessage, messages[k]).tool_call_id in paths]
        if results:
            matched = [cast(ToolMessage, messages[k]).tool_call_id for k in results]
            bundles.append(
                _SkillBundle(
                    ai_index=i,
                    tool_indices=tuple(results),
                    call_ids=frozenset(matched),
                    tokens=sum(count_tokens([messages[k]]) for k in results),
                    key="|".join(sorted(paths[call_id] for call_id in matched)),
                )
            )
        i = end if paths else i + 1
    return bundles


def _select_skill_bundles(bundles: list[_SkillBundle], config: SummarizationConfig) -> list[_SkillBundle]:
    """Newest first, one per skill, within the count, total-token and per-skill budgets."""
    selected: list[_SkillBundle] = []
    seen: set[str] = set()
    total = 0
    for bundle in reversed(bundles):
        if len(selected) >= config.preserve_recent_skill_count:
            break
        if bundle.key in seen or bundle.tokens > config.preserve_recent_skill_tokens_per_skill:
            continue
        if total + bundle.tokens > config.preserve_recent_skill_tokens:
            continue
        selected.append(bundle)
        total += bundle.tokens
        seen.add(bundle.key)
    return selected[::-1]


def rescue_skill_reads(
    to_summarize: list[AnyMessage], preserved: list[AnyMessage], config: SummarizationConfig
) -> tuple[list[AnyMessage], list[AnyMessage]]:
    """Keep recent skill reads verbatim: each selected AIMessage is split into a copy holding only its skill
    reads (kept, with their results) and a copy holding the rest (summarised)."""
    if not config.preserve_recent_skill_count or not config.preserve_recent_skill_tokens or not to_summarize:
        return to_summarize, preserved
    chosen = _select_skill_bundles(_skill_bundles(to_summarize, config), config)
    if not chosen:
        return to_summarize, preserved
    by_ai = {bundle.ai_index: bundle for bundle in chosen}
    tool_indices = {k for bundle in chosen for k in bundle.tool_indices}
    rescued: list[AnyMessage] = []
    remaining: list[AnyMessage] = []
    for i, message in enumerate(to_summarize):
        bundle = by_ai.get(i)
        if bundle is not None and isinstance(message, AIMessage):
            kept = [call for call in message.tool_calls if call.get("id") in bundle.call_ids]
            rest = [call for call in message.tool_calls if call.get("id") not in bundle.call_ids]
            rescued.append(clone_with_tool_calls(message, list(kept), content=""))
            if rest or message.content:
                remaining.append(clone_with_tool_calls(message, list(rest)))
        elif i in tool_indices:
            rescued.append(message)
        else:
            remaining.append(message)
    return remaining, rescued + preserved
