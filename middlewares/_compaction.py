"""Summarization's compaction plan, pure: whether a trigger fires, where to cut, and what survives the cut.

langchain's ``SummarizationMiddleware`` (``_determine_cutoff_index``, its safe cutoff that never splits an
AIMessage from its ToolMessages) with DeerFlow's additions: recent skill-file reads kept verbatim, and
SystemMessages, DynamicContext reminders and the current request never summarised. Used by
``middlewares/summarization.py``; tested in ``tests/test_compaction.py``. The middleware's config types are
defined here, where the plan reads them, so this module needs nothing from the middleware that uses it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately
from pydantic import BaseModel, ConfigDict, Field, model_validator

from middlewares._messages import SUMMARY_MESSAGE_NAME, is_dynamic_context_reminder, is_genuine_user_message
from middlewares._tool_calls import clone_with_tool_calls
from vocabulary.messages import last_ai_message

DEFAULT_MESSAGES_TO_KEEP = 20


class ContextSize(BaseModel):
    """A trigger or retention size: a message count, a token count, or a fraction of the context window."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["messages", "tokens", "fraction"]
    value: float = Field(gt=0)

    @model_validator(mode="after")
    def _in_range(self) -> ContextSize:
        if self.type == "fraction" and self.value > 1:
            raise ValueError("a fraction must be in (0, 1]")
        if self.type != "fraction" and self.value != int(self.value):
            raise ValueError(f"{self.type} must be a whole number")
        return self


class SummarizationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    model: str | None = Field(default=None, description="model spec for summaries; unset = the run's model")
    trigger: ContextSize | list[ContextSize] | None = Field(
        default=None, description="when to summarise (a list: any of them); unset = never"
    )
    keep: ContextSize = Field(default_factory=lambda: ContextSize(type="messages", value=DEFAULT_MESSAGES_TO_KEEP))
    trim_tokens_to_summarize: int | None = Field(default=4000, ge=1, description="summary input budget; null = all")
    summary_prompt: str | None = Field(default=None, description="template with {messages}; unset = langchain's")
    preserve_recent_skill_count: int = Field(default=5, ge=0, description="recent skill reads kept verbatim; 0 = off")
    preserve_recent_skill_tokens: int = Field(default=25_000, ge=0)
    preserve_recent_skill_tokens_per_skill: int = Field(default=5_000, ge=0)
    skill_file_read_tool_names: list[str] = Field(default_factory=lambda: ["read_file", "read", "view", "cat"])
    skills_container_path: str = Field(default="/mnt/skills", description="DeerFlow's skills.container_path")

    @property
    def triggers(self) -> list[ContextSize]:
        if self.trigger is None:
            return []
        return list(self.trigger) if isinstance(self.trigger, list) else [self.trigger]


_SKILL_PATH_ARGS = ("path", "file_path", "filepath")


def count_tokens(messages: Sequence[BaseMessage]) -> int:
    """langchain's default counter for summarisation: approximate, scaled by the last reported usage."""
    return count_tokens_approximately(messages, use_usage_metadata_scaling=True)


def _count_unscaled(messages: Sequence[BaseMessage]) -> int:
    return count_tokens_approximately(messages)


# -- when, and where to cut ------------------------------------------------------------------------------


def should_summarize(
    messages: Sequence[BaseMessage],
    total_tokens: int,
    triggers: Sequence[ContextSize],
    *,
    max_input_tokens: int | None,
    provider: str,
) -> bool:
    for trigger in triggers:
        if trigger.type == "messages" and len(messages) >= trigger.value:
            return True
        if trigger.type == "fraction":
            if max_input_tokens is None:
                continue  # DeerFlow drops fraction clauses a model without a known context window cannot resolve
            threshold = max(int(max_input_tokens * trigger.value), 1)
        elif trigger.type == "tokens":
            threshold = int(trigger.value)
        else:
            continue
        if total_tokens >= threshold or _reported_tokens_reach(messages, threshold, provider):
            return True
    return False


def _reported_tokens_reach(messages: Sequence[BaseMessage], threshold: int, provider: str) -> bool:
    """The provider's own count on the last AIMessage, trusted only when that provider is the run's."""
    last_ai = last_ai_message(messages)
    if last_ai is None or last_ai.usage_metadata is None:
        return False
    reported = last_ai.usage_metadata.get("total_tokens", -1)
    return bool(reported) and reported >= threshold and last_ai.response_metadata.get("model_provider") == provider


def cutoff_index(messages: Sequence[BaseMessage], keep: ContextSize, *, max_input_tokens: int | None) -> int:
    """Where the kept tail starts (langchain's ``_determine_cutoff_index``); 0 means nothing to summarise."""
    if keep.type == "messages":
        return _find_safe_cutoff(messages, int(keep.value))
    if keep.type == "fraction" and max_input_tokens is None:
        return _find_safe_cutoff(messages, DEFAULT_MESSAGES_TO_KEEP)
    target = int(max_input_tokens * keep.value) if keep.type == "fraction" and max_input_tokens else int(keep.value)
    return _find_token_based_cutoff(messages, max(target, 1))


def _find_safe_cutoff(messages: Sequence[BaseMessage], messages_to_keep: int) -> int:
    if len(messages) <= messages_to_keep:
        return 0
    return find_safe_cutoff_point(messages, len(messages) - messages_to_keep)


def _find_token_based_cutoff(messages: Sequence[BaseMessage], target_tokens: int) -> int:
    if not messages or count_tokens(messages) <= target_tokens:
        return 0
    # The earliest start whose suffix fits the budget (suffix size only shrinks as the start moves right).
    left, right = 0, len(messages)
    candidate = len(messages)
    for _ in range(len(messages).bit_length() + 1):
        if left >= right:
            break
        mid = (left + right) // 2
        if _count_unscaled(messages[mid:]) <= target_tokens:
            candidate, right = mid, mid
        else:
            left = mid + 1
    if candidate == len(messages):
        candidate = left
    if candidate >= len(messages):
        if len(messages) == 1:
            return 0
        candidate = len(messages) - 1
    return find_safe_cutoff_point(messages, candidate)


def find_safe_cutoff_point(messages: Sequence[BaseMessage], index: int) -> int:
    """Move a cutoff that lands on ToolMessages back to the AIMessage that called them (or, when there is
    none, past the orphans), so no AI/Tool pair is split."""
    if index >= len(messages) or not isinstance(messages[index], ToolMessage):
        return index
    call_ids: set[str] = set()
    end = index
    while end < len(messages) and isinstance(message := messages[end], ToolMessage):
        if message.tool_call_id:
            call_ids.add(message.tool_call_id)
        end += 1
    for i in range(index - 1, -1, -1):
        candidate = messages[i]
        if isinstance(candidate, AIMessage) and call_ids & {call.get("id") for call in candidate.tool_calls}:
            return i
    return end


# -- what survives ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _SkillBundle:
    """The skill-file reads of one AIMessage and their ToolMessages."""

    ai_index: int
    tool_indices: tuple[int, ...]
    call_ids: frozenset[str]
    tokens: int
    key: str


def _tool_call_path(call: Mapping[str, Any]) -> str | None:
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
    path, root = _tool_call_path(call), config.skills_container_path.rstrip("/")
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
            str(call["id"]): cast(str, _tool_call_path(call))
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


def rescue_context(
    to_summarize: list[AnyMessage], preserved: list[AnyMessage], *, latest_user_id: str | None
) -> tuple[list[AnyMessage], list[AnyMessage]]:
    """SystemMessages, DynamicContext reminders and the current request (by exact id) are never summarised.
    Older ``__user`` copies are: they are stale requests, and keeping them contaminates later turns."""
    rescued: list[AnyMessage] = []
    remaining: list[AnyMessage] = []
    for message in to_summarize:
        if (
            isinstance(message, SystemMessage)
            or is_dynamic_context_reminder(message)
            or (latest_user_id is not None and message.id == latest_user_id)
        ):
            rescued.append(message)
        else:
            remaining.append(message)
    return remaining, rescued + preserved


@dataclass(frozen=True)
class Compaction:
    to_summarize: list[AnyMessage]
    preserved: list[AnyMessage]


def plan_compaction(
    messages: list[AnyMessage],
    summary_text: str | None,
    config: SummarizationConfig,
    *,
    max_input_tokens: int | None,
    provider: str,
) -> Compaction | None:
    """What to summarise and what to keep, or ``None`` when no trigger fires or nothing can be summarised."""
    counted: list[BaseMessage] = list(messages)
    if summary_text:
        counted.append(HumanMessage(summary_text, name=SUMMARY_MESSAGE_NAME))
    if not should_summarize(
        counted, count_tokens(counted), config.triggers, max_input_tokens=max_input_tokens, provider=provider
    ):
        return None
    cutoff = cutoff_index(messages, config.keep, max_input_tokens=max_input_tokens)
    if cutoff <= 0:
        return None
    latest_user_id = next((m.id for m in reversed(messages) if is_genuine_user_message(m)), None)
    to_summarize, preserved = rescue_skill_reads(messages[:cutoff], messages[cutoff:], config)
    to_summarize, preserved = rescue_context(to_summarize, preserved, latest_user_id=latest_user_id)
    if not to_summarize:
        return None
    return Compaction(to_summarize, preserved)
