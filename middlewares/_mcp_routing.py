"""The matching behind McpRouting: which deferred MCP tools a user message asks for (pure, deterministic).

DeerFlow matches configured routing keywords against the message. hartflow derives the keywords from what
every MCP server already publishes: the words of a tool's name (its server prefix included, so "git" finds
the git tools) weigh 2, the words of its description weigh 1. A tool scores the sum over the distinct words
it shares with the message; ties go to the name, alphabetically. Words are lower-cased runs of letters and
digits, a plural ``s`` dropped, short and common words ignored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MIN_TOP_K, MAX_TOP_K = 1, 5
NAME_WEIGHT, DESCRIPTION_WEIGHT = 2, 1

_WORD = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "get",
        "give",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "please",
        "show",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "this",
        "to",
        "use",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
        "tool",
        "tools",
    ]
)


def words(text: str) -> frozenset[str]:
    found = set()
    for word in _WORD.findall(text.lower()):
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        if len(word) >= 2 and word not in _STOPWORDS:
            found.add(word)
    return frozenset(found)


@dataclass(frozen=True)
class RoutingEntry:
    name: str
    name_words: frozenset[str]
    description_words: frozenset[str]

    @classmethod
    def of(cls, name: str, description: str) -> RoutingEntry:
        name_words = words(name.replace("_", " ").replace("-", " "))
        return cls(name, name_words, words(description) - name_words)

    def score(self, query: frozenset[str]) -> int:
        return NAME_WEIGHT * len(query & self.name_words) + DESCRIPTION_WEIGHT * len(query & self.description_words)


def clamp_top_k(top_k: int) -> int:
    return max(MIN_TOP_K, min(MAX_TOP_K, top_k))


def build_index(tools: Iterable[tuple[str, str]]) -> tuple[RoutingEntry, ...]:
    """(name, description) pairs → the routing index, in the given order."""
    return tuple(RoutingEntry.of(name, description) for name, description in tools)


def best_matches(index: Sequence[RoutingEntry], message: str, top_k: int) -> list[str]:
    """The names of the (at most ``clamp_top_k(top_k)``) tools that match ``message`` best; none match → []."""
    query = words(message)
    if not query:
        return []
    scored = [(entry.score(query), entry.name) for entry in index]
    ranked = sorted((item for item in scored if item[0] > 0), key=lambda item: (-item[0], item[1]))
    return [name for _, name in ranked[: clamp_top_k(top_k)]]
