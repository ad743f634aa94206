"""The compaction plan's pieces (middlewares/_compaction.py): the safe cutoff, the kept tail, the rescues.

Triggers and whole plans are exercised through the middleware in tests/test_summarization.py.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from middlewares._compaction import cutoff_index, find_safe_cutoff_point, rescue_context
from middlewares._skill_reads import rescue_skill_reads
from middlewares._summarization_config import count_tokens
from middlewares.summarization import ContextSize, SummarizationConfig


def _call(call_id: str, name: str = "bash", **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id}


def test_a_cutoff_on_tool_results_moves_back_to_their_ai_message() -> None:
    messages: list[Any] = [
        HumanMessage("go", id="h0"),
        AIMessage("", tool_calls=[_call("c1"), _call("c2")], id="a1"),
        ToolMessage("one", tool_call_id="c1", id="t1"),
        ToolMessage("two", tool_call_id="c2", id="t2"),
        AIMessage("done", id="a2"),
    ]
    assert find_safe_cutoff_point(messages, 3) == 1
    assert find_safe_cutoff_point(messages, 4) == 4, "a cutoff on an AIMessage stays"


def test_orphan_tool_results_are_skipped_past() -> None:
    messages: list[Any] = [ToolMessage("lost", tool_call_id="gone", id="t0"), HumanMessage("hi", id="h1")]
    assert find_safe_cutoff_point(messages, 0) == 1


def test_keep_by_messages_and_by_tokens() -> None:
    messages: list[Any] = [HumanMessage(f"message {i} " + "x" * 100, id=f"h{i}") for i in range(10)]
    assert cutoff_index(messages, ContextSize(type="messages", value=4), max_input_tokens=None) == 6
    assert cutoff_index(messages, ContextSize(type="messages", value=20), max_input_tokens=None) == 0
    budget = count_tokens(messages[-3:])
    assert cutoff_index(messages, ContextSize(type="tokens", value=budget), max_input_tokens=None) == 7
    # A fraction without a known context window keeps DeerFlow's default message count.
    assert cutoff_index(messages, ContextSize(type="fraction", value=0.5), max_input_tokens=None) == 0


def test_system_messages_reminders_and_the_current_request_are_rescued() -> None:
    old: list[Any] = [SystemMessage("rules", id="s0"), HumanMessage("stale", id="h0"), HumanMessage("now", id="h1")]
    remaining, preserved = rescue_context(old, [AIMessage("tail", id="a9")], latest_user_id="h1")
    assert [m.id for m in remaining] == ["h0"]
    assert [m.id for m in preserved] == ["s0", "h1", "a9"]


def test_a_skill_read_is_split_out_of_its_ai_message() -> None:
    skill = _call("c1", "read_file", path="/mnt/skills/public/x/SKILL.md")
    other = _call("c2", "bash", command="ls")
    old: list[Any] = [
        AIMessage("reading", tool_calls=[skill, other], id="a1"),
        ToolMessage("skill body", tool_call_id="c1", id="t1"),
        ToolMessage("listing", tool_call_id="c2", id="t2"),
    ]
    remaining, preserved = rescue_skill_reads(old, [], SummarizationConfig(enabled=True))
    kept_ai, kept_tool = preserved
    assert isinstance(kept_ai, AIMessage) and [c["id"] for c in kept_ai.tool_calls] == ["c1"]
    assert kept_tool.id == "t1"
    summarised_ai = remaining[0]
    assert isinstance(summarised_ai, AIMessage) and [c["id"] for c in summarised_ai.tool_calls] == ["c2"]
    assert [m.id for m in remaining[1:]] == ["t2"]
