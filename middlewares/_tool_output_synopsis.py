"""The preview that replaces an externalised tool output (DeerFlow's ``tool_output_synopsis.py``).

Deterministic, no LLM: the output is classified as json, xml, tsv, csv, yaml, code or text (``unknown`` for
empty, oversized or binary-like output) and summarised by kind, followed by a raw head/tail sample and the
``read_file`` hint. The wording is DeerFlow's: models are prompted with these previews. The structured kinds
(json, xml, tables, yaml) are summarised in ``middlewares/_data_synopsis.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from middlewares._data_synopsis import Synopsis, json_synopsis, looks_code, table_synopsis, xml_synopsis, yaml_synopsis
from vocabulary.text import one_line

MAX_SYNOPSIS_INPUT_BYTES = 5_000_000
"""Bigger outputs are not parsed (memory/CPU, entity and alias bombs): they get a raw sample only."""
_TEXT_HEADER_LIMIT = 16
_EXCERPT_CHARS = 420
_CODE_IMPORT_LIMIT = 12
_CODE_SYMBOL_LIMIT = 24

_IMPORT = re.compile(r"^(?:from\s+(\S+)\s+import|import\s+(\S+))")
_SYMBOL = re.compile(r"^(class|def|async\s+def|function|export\s+function|pub\s+fn|fn)\s+([A-Za-z_]\w*)")
_TEXT_HEADER = (re.compile(r"^#{1,6}\s+"), re.compile(r"^[A-Z0-9][A-Z0-9\s:_-]{6,}$"))


def render_tool_output_preview(
    content: str, *, tool_name: str, virtual_path: str, head_chars: int, tail_chars: int
) -> str:
    """The text the model sees instead of an output saved to ``virtual_path``."""
    total = len(content)
    head, tail = max(0, head_chars), max(0, tail_chars)
    # Text excerpts would repeat the raw sample below, so text keeps them only when no sample follows.
    with_excerpts = not (head + tail > 0 and total > head + tail)
    synopsis = synopsize(content, tool_name=tool_name, text_excerpts=with_excerpts)
    lines = [
        f"[Full {tool_name} output saved to {virtual_path} ({total} chars, ~{total // 4} tokens).]",
        f"[Preview kind: {synopsis.kind}. This is a structured synopsis, not a raw head/tail truncation.]",
        "",
        f"{synopsis.title}:",
        *(f"- {item}" for item in synopsis.summary),
    ]
    for heading, items in (("Structure:", synopsis.structure), ("Notable items:", synopsis.notable)):
        if items:
            lines += ["", heading, *(f"- {item}" for item in items)]
    sample = synopsis.sample or raw_sample(content, head, tail)
    if sample:
        lines += ["", "Raw sample (head + tail, clipped to head_chars / tail_chars):", sample]
    lines += [
        "",
        "Access:",
        f"- Use read_file on {virtual_path} with start_line and end_line to inspect the raw output.",
    ]
    return "\n".join(lines)


def raw_sample(content: str, head_chars: int, tail_chars: int) -> str:
    """Head and tail of ``content`` cut at line breaks (the head ends before its last newline, the tail starts
    after its first), joined by ``\\n...\\n``; the whole content when both fit."""
    if head_chars <= 0 and tail_chars <= 0:
        return ""
    if len(content) <= head_chars + tail_chars:
        return content
    parts = []
    if head_chars > 0:
        head = content[:head_chars]
        cut = head.rfind("\n")
        parts.append(head[:cut] if cut > 0 else head)
    if tail_chars > 0:
        tail = content[-tail_chars:]
        cut = tail.find("\n")
        parts.append(tail[cut + 1 :] if 0 <= cut < len(tail) - 1 else tail)
    return "\n...\n".join(parts)


def synopsize(content: str, *, tool_name: str = "", text_excerpts: bool = True) -> Synopsis:
    if content == "":
        return Synopsis("unknown", "Empty output", ["The tool returned an empty string."])
    size = len(content.encode("utf-8"))
    if size > MAX_SYNOPSIS_INPUT_BYTES:
        return Synopsis(
            "unknown",
            "Oversized output",
            [
                f"The output has {len(content)} characters ({size / 1024 / 1024:.1f} MB). "
                "Parsing skipped due to size limit."
            ],
            sample=_middle_cut(content, _EXCERPT_CHARS * 2),
        )
    if _looks_binary(content):
        return Synopsis(
            "unknown",
            "Binary-like output",
            [f"The output has {len(content)} characters and includes non-text control bytes."],
            sample=_middle_cut(content, _EXCERPT_CHARS * 2),
        )
    detectors: list[Callable[[str], Synopsis | None]] = [
        json_synopsis,
        xml_synopsis,
        lambda c: table_synopsis(c, "\t", "tsv") if "\t" in c else None,
        lambda c: table_synopsis(c, ",", "csv") if "," in c else None,
        yaml_synopsis,
        lambda c: _code(c) if looks_code(c) else None,
    ]
    for detect in detectors:
        if (synopsis := detect(content)) is not None:
            return synopsis
    return _text(content, tool_name=tool_name, excerpts=text_excerpts)


# -- helpers ---------------------------------------------------------------------------------------------


def _middle_cut(content: str, limit: int) -> str:
    if len(content) <= limit:
        return content
    half = max(1, limit // 2)
    return f"{content[:half]}\n...\n{content[-half:]}"


def _looks_binary(content: str) -> bool:
    if "\x00" in content:
        return True
    sample = content[:1000]
    controls = sum(1 for char in sample if ord(char) < 32 and char not in "\n\r\t")
    return controls / max(1, len(sample)) > 0.05


# -- code and text ---------------------------------------------------------------------------------------


def _code(content: str) -> Synopsis:
    lines = content.splitlines()
    imports: list[str] = []
    symbols: list[str] = []
    for line in lines:
        stripped = line.strip()
        if match := _IMPORT.match(stripped):
            imports.append(one_line(match.group(1) or match.group(2) or "", 160))
        elif match := _SYMBOL.match(stripped):
            symbols.append(one_line(f"{match.group(1)} {match.group(2)}", 180))
    structure = [f"line count: {len(lines)}"]
    if imports:
        structure.append(f"imports: {', '.join(imports[:_CODE_IMPORT_LIMIT])}")
    return Synopsis(
        "code",
        "Code-like output",
        [f"Code-like text with {len(lines)} lines."],
        structure,
        symbols[:_CODE_SYMBOL_LIMIT],
    )


def _text(content: str, *, tool_name: str, excerpts: bool) -> Synopsis:
    lines = content.splitlines()
    words = len(content.split())
    headers: list[str] = []
    for line in lines:
        stripped = line.strip()
        if stripped and any(pattern.match(stripped) for pattern in _TEXT_HEADER):
            header = one_line(stripped, 160)
            if header not in headers:
                headers.append(header)
                if len(headers) >= _TEXT_HEADER_LIMIT:
                    break
    source = f" from {tool_name}" if tool_name else ""
    summary = [
        f"Text output{source} with {len(content)} characters, {words} words, and {len(lines)} lines.",
        f"Detected section headers: {' | '.join(headers) if headers else 'none detected'}.",
    ]
    if excerpts:
        summary.append(f"Opening excerpt: {one_line(content[:_EXCERPT_CHARS], _EXCERPT_CHARS) or '(empty)'}")
        if len(content) > _EXCERPT_CHARS:
            closing = one_line(content[max(_EXCERPT_CHARS, len(content) - _EXCERPT_CHARS) :], _EXCERPT_CHARS)
            if closing:
                summary.append(f"Closing excerpt: {closing}")
    return Synopsis("text", "Text output", summary)
