"""Summarization's compaction plan, pure: whether a trigger fires, where to cut, and what survives the cut.

langchain's ``SummarizationMiddleware`` (``_determine_cutoff_index``, its safe cutoff that never splits an
AIMessage from its ToolMessages) with DeerFlow's additions: recent skill-file reads kept verbatim
(``middlewares/_skill_reads.py``), and SystemMessages, DynamicContext reminders and the current request never
summarised. Used by ``middlewares/summarization.py``; tested in ``tests/test_compaction.py``. The middleware's
config types are in ``middlewares/_summarization_config.py``, so this module needs nothing from the middleware
that uses it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately

from middlewares._messages import SUMMARY_MESSAGE_NAME, is_dynamic_context_reminder, is_genuine_user_message
from middlewares._skill_reads import rescue_skill_reads
from middlewares._summarization_config import (
    DEFAULT_MESSAGES_TO_KEEP,
    ContextSize,
    SummarizationConfig,
    count_tokens,
)
from vocabulary.messages import last_ai_message


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
