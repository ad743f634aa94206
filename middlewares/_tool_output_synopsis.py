"""The preview that replaces an externalised tool output (DeerFlow's ``tool_output_synopsis.py``).

Deterministic, no LLM: the output is classified as json, xml, tsv, csv, yaml, code or text (``unknown`` for
empty, oversized or binary-like output) and summarised by kind, followed by a raw head/tail sample and the
``read_file`` hint. The wording is DeerFlow's: models are prompted with these previews.
"""

from __future__ import annotations

import csv
import io
import json
import re
import xml.etree.ElementTree as ElementTree
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from vocabulary.text import clip, one_line

Kind = Literal["json", "csv", "tsv", "yaml", "xml", "code", "text", "unknown"]

MAX_SYNOPSIS_INPUT_BYTES = 5_000_000
"""Bigger outputs are not parsed (memory/CPU, entity and alias bombs): they get a raw sample only."""
_YAML_MAX_CHARS = 500_000
_KEY_LIMIT = 12
_SCALAR_LIMIT = 6
_JSON_SHAPE_DEPTH = 2
_JSON_PATH_LIMIT = 24
_JSON_PATH_DEPTH = 4
_TABLE_SAMPLE_ROWS = 50
_TABLE_MIN_DATA_ROWS = 5
_TABLE_COLUMN_LIMIT = 18
_TEXT_HEADER_LIMIT = 16
_EXCERPT_CHARS = 420
_CODE_IMPORT_LIMIT = 12
_CODE_SYMBOL_LIMIT = 24

_CODE_HINTS = (
    re.compile(r"^\s*(?:from\s+\S+\s+import|import\s+\S+)", re.MULTILINE),
    re.compile(r"^\s*(?:class|def|async\s+def|function|export\s+function)\s+[A-Za-z_]\w*", re.MULTILINE),
    # Rust/Java need a stronger signal than a bare "use word" or "fn word", which prose also contains.
    re.compile(
        r"^\s*(?:package\s+[A-Za-z_][\w.]*|use\s+[A-Za-z_][\w:]*\s*;|pub\s+fn\s+[A-Za-z_]\w*\s*\(|"
        r"fn\s+[A-Za-z_]\w*\s*\(|public\s+class\s+[A-Za-z_]\w*)",
        re.MULTILINE,
    ),
)
_IMPORT = re.compile(r"^(?:from\s+(\S+)\s+import|import\s+(\S+))")
_SYMBOL = re.compile(r"^(class|def|async\s+def|function|export\s+function|pub\s+fn|fn)\s+([A-Za-z_]\w*)")
_TABLE_HEADER_CELL = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_YAML_KEY_LINE = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_.\-]*:\s*\S.*$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TEXT_HEADER = (re.compile(r"^#{1,6}\s+"), re.compile(r"^[A-Z0-9][A-Z0-9\s:_-]{6,}$"))


@dataclass(frozen=True)
class Synopsis:
    kind: Kind
    title: str
    summary: list[str]
    structure: list[str] = field(default_factory=list)
    notable: list[str] = field(default_factory=list)
    sample: str = ""
    """A raw sample the synopsis itself chose (binary-like and oversized output)."""


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
        _json,
        _xml,
        lambda c: _table(c, "\t", "tsv") if "\t" in c else None,
        lambda c: _table(c, ",", "csv") if "," in c else None,
        _yaml,
        lambda c: _code(c) if _looks_code(c) else None,
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


def _looks_code(content: str) -> bool:
    return any(hint.search(content) for hint in _CODE_HINTS)


def _type_name(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return "number"
    return "string"


# -- json ------------------------------------------------------------------------------------------------


def _json(content: str) -> Synopsis | None:
    stripped = content.strip()
    if not stripped.startswith(("{", "[")):
        return None
    try:
        value, end = json.JSONDecoder().raw_decode(stripped)
    except ValueError:
        return None
    structure = [f"shape: {_json_shape(value, 0)}", *_json_paths(value)]
    notable = _json_scalars(value)
    if isinstance(value, dict):
        keys = [str(key) for key in value]
        summary = [
            f"JSON object with {len(keys)} top-level keys.",
            f"Top-level keys: {', '.join(keys[:_KEY_LIMIT]) or '(none)'}",
        ]
    else:
        summary = [f"JSON array with {len(value)} items."]
        if value:
            structure.append(f"first item type: {_type_name(value[0])}")
    if trailing := len(stripped[end:].strip()):
        notable.append(f"Trailing non-JSON characters after first value: {trailing}")
    return Synopsis("json", "JSON output", summary, structure, notable)


def _json_shape(value: Any, depth: int) -> str:
    if depth >= _JSON_SHAPE_DEPTH:
        return "..."
    if isinstance(value, dict):
        keys = ", ".join(str(key) for key in list(value)[:_KEY_LIMIT])
        return f"object(keys={len(value)}{': ' + keys if keys else ''})"
    if isinstance(value, list):
        first = ", ".join(_json_shape(item, depth + 1) for item in value[:3])
        return f"array(len={len(value)}{', first=[' + first + ']' if first else ''})"
    return _type_name(value)


def _json_paths(value: Any) -> list[str]:
    """Where the nested containers are (``$.a.b: object keys 3; keys x, y, z``), breadth-limited."""
    paths: list[str] = []

    def describe(node: Any) -> str:
        if isinstance(node, dict):
            keys = ", ".join(str(key) for key in list(node)[:_KEY_LIMIT])
            return f"object keys {len(node)}{'; keys ' + keys if keys else ''}"
        return f"array length {len(node)}{'; first item ' + _type_name(node[0]) if node else ''}"

    def walk(node: Any, path: str, depth: int) -> None:
        if len(paths) >= _JSON_PATH_LIMIT or depth >= _JSON_PATH_DEPTH:
            return
        if isinstance(node, dict):
            for key, child in list(node.items())[:_KEY_LIMIT]:
                if len(paths) >= _JSON_PATH_LIMIT:
                    return
                name = str(key)
                child_path = f"{path}.{name}" if _IDENTIFIER.match(name) else f"{path}[{json.dumps(name)}]"
                if isinstance(child, dict | list):
                    paths.append(f"{child_path}: {describe(child)}")
                    walk(child, child_path, depth + 1)
        elif isinstance(node, list) and node and isinstance(node[0], dict | list):
            walk(node[0], f"{path}[]", depth + 1)

    walk(value, "$", 0)
    return paths


def _json_scalars(value: Any) -> list[str]:
    found: list[str] = []

    def walk(node: Any, path: str, depth: int) -> None:
        if len(found) >= _SCALAR_LIMIT or depth >= _JSON_PATH_DEPTH:
            return
        if isinstance(node, dict):
            children = [(f"{path}.{key}", child) for key, child in list(node.items())[:_KEY_LIMIT]]
        elif isinstance(node, list):
            children = [(f"{path}[{index}]", child) for index, child in enumerate(node[:2])]
        else:
            shown = json.dumps(clip(node, 80), ensure_ascii=False) if isinstance(node, str) else clip(repr(node), 80)
            found.append(f"{path}: {shown}")
            return
        for child_path, child in children:
            walk(child, child_path, depth + 1)
            if len(found) >= _SCALAR_LIMIT:
                return

    walk(value, "$", 0)
    return found


# -- xml -------------------------------------------------------------------------------------------------


def _xml(content: str) -> Synopsis | None:
    stripped = content.strip()
    if not stripped.startswith("<"):
        return None
    try:
        # The stdlib parser neither fetches external entities nor (with expat >= 2.4) expands entity bombs.
        root = ElementTree.fromstring(stripped)
    except ElementTree.ParseError:
        return None
    children = Counter(child.tag for child in root)
    structure = [f"root tag: {root.tag}", f"root attributes: {len(root.attrib)}"]
    structure += [f"{tag}: {count}" for tag, count in children.most_common(_KEY_LIMIT)]
    return Synopsis("xml", "XML output", [f"XML document with root tag {root.tag}."], structure)


# -- tables ----------------------------------------------------------------------------------------------


def _table(content: str, delimiter: str, kind: Literal["csv", "tsv"]) -> Synopsis | None:
    sample = "\n".join(content.splitlines()[:_TABLE_SAMPLE_ROWS])
    try:
        rows = [row for row in csv.reader(io.StringIO(sample), delimiter=delimiter) if any(c.strip() for c in row)]
    except csv.Error:
        return None
    if len(rows) < 2 or len(rows[0]) < 2:
        return None
    header, width = rows[0], len(rows[0])
    # Indented shell output, ``ls -l`` listings and prose with a comma look tabular too: demand several
    # consistent rows under a header of identifier-like names.
    if sum(1 for row in rows[1:11] if len(row) == width) < _TABLE_MIN_DATA_ROWS:
        return None
    if any(not _TABLE_HEADER_CELL.match(cell.strip()) or cell.startswith((" ", "\t")) for cell in header):
        return None
    columns = [cell.strip() or f"column_{index + 1}" for index, cell in enumerate(header)]
    data_rows = max(0, sum(1 for line in content.splitlines() if line.strip()) - 1)
    # key=value pairs, because re-joining cells that contain the delimiter would misstate the column count.
    first = [
        f"{name}={clip(cell, 80)}" for name, cell in list(zip(columns, rows[1], strict=False))[:_TABLE_COLUMN_LIMIT]
    ]
    label = kind.upper()
    return Synopsis(
        kind,
        f"{label} table output",
        [f"{label} table with {data_rows} data rows and {width} columns."],
        [f"columns: {', '.join(columns[:_TABLE_COLUMN_LIMIT])}", f"first data row: {' | '.join(first) or '(none)'}"],
    )


# -- yaml ------------------------------------------------------------------------------------------------


def _looks_yaml(content: str) -> bool:
    if content.lstrip().startswith("---"):
        return True
    if _looks_code(content):
        return False
    keyed = 0
    for line in content.splitlines()[:80]:
        if not _YAML_KEY_LINE.match(line):
            continue
        key = line.split(":", 1)[0].strip()
        if key.isupper() and "_" not in key:
            continue  # "INFO: starting" is a log line, not a mapping
        keyed += 1
        if keyed >= 3:
            return True
    return False


def _yaml(content: str) -> Synopsis | None:
    if not _looks_yaml(content) or len(content) > _YAML_MAX_CHARS:
        return None
    try:
        value = yaml.safe_load(content)
    except yaml.YAMLError:
        return None
    if not isinstance(value, dict | list):
        return None
    # Logs and tracebacks load as flat string mappings; calling them "YAML with N keys" would mislead.
    if isinstance(value, dict) and value and all(isinstance(child, str) for child in value.values()):
        return None
    if isinstance(value, dict):
        keys = [str(key) for key in value]
        summary = [f"YAML object with {len(keys)} top-level keys.", f"Top-level keys: {', '.join(keys[:_KEY_LIMIT])}"]
        structure = [f"{key}: {_type_name(child)}" for key, child in list(value.items())[:_KEY_LIMIT]]
    else:
        summary = [f"YAML array with {len(value)} items."]
        structure = [f"first item type: {_type_name(value[0])}"] if value else []
    return Synopsis("yaml", "YAML output", summary, structure)


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
