"""The summary prompt (middlewares/_summary_prompt.py): canned answers, escaping and the text budget."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from middlewares._summary_prompt import (
    DEFAULT_SUMMARY_PROMPT,
    NO_HISTORY_SUMMARY,
    _trim_text,
    summary_prompt,
)
from middlewares.summarization import SummarizationConfig


def test_nothing_to_summarise_is_the_canned_summary() -> None:
    assert summary_prompt([], "earlier", SummarizationConfig()) == NO_HISTORY_SUMMARY


def test_the_prompt_wraps_the_new_messages_in_the_default_template() -> None:
    messages: list[Any] = [HumanMessage("a < b", id="h0"), AIMessage("yes", id="a0")]
    prompt = summary_prompt(messages, None, SummarizationConfig())
    assert prompt.startswith(DEFAULT_SUMMARY_PROMPT.split("{messages}")[0])
    assert "<new_messages>\nHuman: a &lt; b\nAI: yes\n</new_messages>" in prompt
    assert "<existing_summary>" not in prompt


def test_trim_text_keeps_the_start_or_the_end() -> None:
    text = "".join(f"word{i} " for i in range(200))
    first, last = _trim_text(text, 20, "first"), _trim_text(text, 20, "last")
    assert text.startswith(first) and text.endswith(last)
    assert 0 < len(first) < len(text) and 0 < len(last) < len(text)
    assert _trim_text("   ", 20, "first") == ""
