"""Short text: a string cut to a bound (at its end, or in its middle), on one line, and a model spec as a label.

One place for the cuts that show up in model-visible results (tool errors, grep lines, output synopses) and in
the Web UI's summaries and details, so every bound counts its marker the same way.
"""

from __future__ import annotations

ELLIPSIS = "…"
"""One character, for the Web UI's summaries and details; model-visible text cuts with ``...``."""


def clip(text: str, limit: int, marker: str = "...") -> str:
    """``text`` within ``limit`` characters: cut, with ``marker`` in the last of them; nothing when ``limit`` is
    not positive."""
    if limit <= 0:
        return ""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(marker))] + marker


def one_line(text: str, limit: int, marker: str = "...") -> str:
    """``text`` with every run of whitespace (newlines included) as one space, then :func:`clip`-ped."""
    return clip(" ".join(text.split()), limit, marker)


def head_and_tail(text: str, cap: int, marker: str = "\n...\n") -> str:
    """``text`` within ``cap`` characters: its first two thirds and its end, joined by ``marker``; only the head
    when the cap leaves no room for the marker and a tail."""
    if len(text) <= cap:
        return text
    head = cap * 2 // 3
    tail = max(0, cap - head - len(marker))
    if cap <= len(marker) or tail == 0:
        return text[:cap]
    return f"{text[:head]}{marker}{text[-tail:]}"


def model_label(spec: str) -> str:
    """``openai:gpt-4o`` as it is; a scripted model by its file name (``scripted:/tmp/x/lead.json`` →
    ``scripted:lead.json``), since its path says nothing and may be long."""
    provider, _, name = spec.partition(":")
    if provider == "scripted":
        name = name.replace("\\", "/").rsplit("/", 1)[-1]
    return f"{provider}:{name}" if name else provider
