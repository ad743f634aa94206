"""The shared short-text helpers (vocabulary/text.py)."""

from __future__ import annotations

import pytest

from vocabulary.text import ELLIPSIS, clip, head_and_tail, model_label, one_line


def test_clip_keeps_short_text_and_counts_the_marker_in_the_bound() -> None:
    assert clip("abc", 3) == "abc"
    assert clip("abcdef", 5) == "ab..."
    assert clip("abcdef", 5, ELLIPSIS) == "abcd…"
    assert len(clip("x" * 1000, 500)) == 500


def test_clip_to_nothing() -> None:
    assert clip("abc", 0) == ""
    assert clip("abc", -1) == ""


def test_one_line_collapses_whitespace_before_cutting() -> None:
    assert one_line("  a\n\tb   c  ", 10) == "a b c"
    assert one_line("first line\nsecond line", 12, ELLIPSIS) == "first line …"


def test_head_and_tail_keeps_both_ends_within_the_cap() -> None:
    text = "a" * 50 + "b" * 50
    bounded = head_and_tail(text, 30)
    assert len(bounded) == 30 and bounded.startswith("a" * 20) and bounded.endswith("b") and "\n...\n" in bounded
    assert head_and_tail("short", 30) == "short"
    assert head_and_tail(text, 4) == text[:4], "no room for the marker"


@pytest.mark.parametrize(
    ("spec", "label"),
    [
        ("openai:gpt-4o", "openai:gpt-4o"),
        ("scripted:/tmp/x/lead.json", "scripted:lead.json"),
        ("scripted:C:\\runs\\lead.json", "scripted:lead.json"),
        ("openai:", "openai"),
    ],
)
def test_model_label(spec: str, label: str) -> None:
    assert model_label(spec) == label
