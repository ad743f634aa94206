"""Summarization's prompt, pure: the summary model's input, trimmed to a token budget and escaped.

langchain's ``SummarizationMiddleware`` prompt path (``trim_messages`` to ``trim_tokens_to_summarize``, then
``get_buffer_string``) with DeerFlow's ``<existing_summary>`` / ``<new_messages>`` blocks. Used by
``middlewares/summarization.py``; tested in ``tests/test_summary_prompt.py``.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Literal

from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage, get_buffer_string, trim_messages

from middlewares._summarization_config import SummarizationConfig, count_tokens
from vocabulary.text import head_and_tail

# langchain's DEFAULT_SUMMARY_PROMPT (langchain 1.3), which DeerFlow uses when ``summary_prompt`` is unset.
DEFAULT_SUMMARY_PROMPT = """<role>
Context Extraction Assistant
</role>

<primary_objective>
Your sole objective in this task is to extract the highest quality/most relevant context from the conversation history below.
</primary_objective>

<objective_information>
You're nearing the total number of input tokens you can accept, so you must extract the highest quality/most relevant pieces of information from your conversation history.
This context will then overwrite the conversation history presented below. Because of this, ensure the context you extract is only the most important information to continue working toward your overall goal.
</objective_information>

<instructions>
The conversation history below will be replaced with the context you extract in this step.
You want to ensure that you don't repeat any actions you've already completed, so the context you extract from the conversation history should be focused on the most important information to your overall goal.

You should structure your summary using the following sections. Each section acts as a checklist - you must populate it with relevant information or explicitly state "None" if there is nothing to report for that section:

## SESSION INTENT
What is the user's primary goal or request? What overall task are you trying to accomplish? This should be concise but complete enough to understand the purpose of the entire session.

## SUMMARY
Extract and record all of the most important context from the conversation history. Include important choices, conclusions, or strategies determined during this conversation. Include the reasoning behind key decisions. Document any rejected options and why they were not pursued.

## ARTIFACTS
What artifacts, files, or resources were created, modified, or accessed during this conversation? For file modifications, list specific file paths and briefly describe the changes made to each. This section prevents silent loss of artifact information.

## NEXT STEPS
What specific tasks remain to be completed to achieve the session intent? What should you do next?

</instructions>

The user will message you with the full message history from which you'll extract context to create a replacement. Carefully read through it all and think deeply about what information is most important to your overall goal and should be saved:

With all of this in mind, please carefully read over the entire conversation history, and extract the most important and relevant context to replace it so that you can free up space in the conversation history.
Respond ONLY with the extracted context. Do not include any additional information, or text before or after the extracted context.

<messages>
Messages to summarize:
{messages}
</messages>"""  # noqa: E501

NO_HISTORY_SUMMARY = "No previous conversation history."
TOO_LONG_SUMMARY = "Previous conversation was too long to summarize."
CANNED_SUMMARIES = frozenset({NO_HISTORY_SUMMARY, TOO_LONG_SUMMARY})
"""Valid summaries for the empty and too-long edges: no model call is made for them."""

_FALLBACK_MESSAGE_COUNT = 15
_OMITTED_MARKER = "\n...\n"


# -- the summary prompt ----------------------------------------------------------------------------------


def summary_prompt(to_summarize: list[AnyMessage], previous_summary: str | None, config: SummarizationConfig) -> str:
    """The prompt for the summary model, or one of :data:`CANNED_SUMMARIES` when no model call is needed."""
    if not to_summarize:
        return NO_HISTORY_SUMMARY
    trimmed: Sequence[BaseMessage] = _trim_for_summary(to_summarize, config.trim_tokens_to_summarize)
    strategy: Literal["first", "last"] = "first"
    if not trimmed:
        if any(isinstance(m, HumanMessage) for m in to_summarize):
            trimmed = to_summarize[-1:]  # the human anchor fell outside the token-limited tail
        else:
            # An AI/Tool-only window (the request was rescued): bound its raw text, favouring recent content.
            trimmed, strategy = to_summarize, "last"
    text = _summary_input(get_buffer_string(trimmed), previous_summary, config.trim_tokens_to_summarize, strategy)
    if text is None:
        return TOO_LONG_SUMMARY
    return (config.summary_prompt or DEFAULT_SUMMARY_PROMPT).format(messages=text).rstrip()


def _trim_for_summary(messages: list[AnyMessage], max_tokens: int | None) -> list[BaseMessage]:
    if max_tokens is None:
        return list(messages)
    try:
        return trim_messages(
            messages,
            max_tokens=max_tokens,
            token_counter=count_tokens,
            start_on="human",
            strategy="last",
            allow_partial=True,
            include_system=True,
        )
    except Exception:  # langchain falls back the same way when trimming itself fails
        return list(messages[-_FALLBACK_MESSAGE_COUNT:])


def _summary_input(
    formatted: str, previous_summary: str | None, max_tokens: int | None, strategy: Literal["first", "last"]
) -> str | None:
    """``<existing_summary>`` (trimmed from the start) and ``<new_messages>``, escaped against block breakout;
    the budget is split evenly when there is a previous summary."""
    previous = previous_summary.strip() if previous_summary else ""
    if max_tokens is not None:
        if previous:
            new_budget = max(1, max_tokens // 2)
            previous = _trim_text(previous, max(1, max_tokens - new_budget), "last")
            formatted = _trim_text(formatted, new_budget, strategy)
        else:
            formatted = _trim_text(formatted, max_tokens, strategy)
    parts: list[str] = []
    if previous:
        parts += ["<existing_summary>", html.escape(previous, quote=False), "</existing_summary>", ""]
    if formatted:
        parts += ["<new_messages>", html.escape(formatted, quote=False), "</new_messages>"]
    return "\n".join(parts) if parts else None


def _trim_text(text: str, max_tokens: int, strategy: Literal["first", "last"]) -> str:
    """The longest prefix (``first``) or suffix (``last``) of ``text`` whose message fits ``max_tokens`` — what
    ``trim_messages(..., allow_partial=True, text_splitter=list)`` keeps, found by bisection instead of
    dropping one character at a time (which takes seconds on long text, too long for a workflow task)."""
    if not text.strip():
        return ""

    def piece(length: int) -> str:
        return text[:length] if strategy == "first" else text[len(text) - length :]

    low, high = 0, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if count_tokens([HumanMessage(piece(mid))]) <= max_tokens:
            low = mid
        else:
            high = mid - 1
    kept = piece(low)
    if kept.strip():
        return kept
    # Even an empty message exceeds the budget: cap the raw text, keeping the end (last) or both ends (first).
    if strategy == "last":
        if len(text) > max_tokens > len(_OMITTED_MARKER):
            return _OMITTED_MARKER + text[-(max_tokens - len(_OMITTED_MARKER)) :]
        return text[-max_tokens:]
    return head_and_tail(text, max_tokens, _OMITTED_MARKER)
