"""Synopses of structured tool output, pure: JSON, XML, CSV/TSV tables and YAML, each summarised by its shape.

Part of the preview ``middlewares/_tool_output_synopsis.py`` renders (DeerFlow's ``tool_output_synopsis.py``,
``bytedance/deer-flow: backend/packages/harness/deerflow/agents/middlewares/tool_output_synopsis.py``); each
function returns ``None`` when the output is not of its kind. Tested through ``tests/test_tool_output_budget.py``.
"""

from __future__ import annotations

import csv
import io
import json
import re
import xml.etree.ElementTree as ElementTree
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from vocabulary.text import clip

Kind = Literal["json", "csv", "tsv", "yaml", "xml", "code", "text", "unknown"]

_YAML_MAX_CHARS = 500_000
_KEY_LIMIT = 12
_SCALAR_LIMIT = 6
_JSON_SHAPE_DEPTH = 2
_JSON_PATH_LIMIT = 24
_JSON_PATH_DEPTH = 4
_TABLE_SAMPLE_ROWS = 50
_TABLE_MIN_DATA_ROWS = 5
_TABLE_COLUMN_LIMIT = 18
_TABLE_HEADER_CELL = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_YAML_KEY_LINE = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_.\-]*:\s*\S.*$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
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


@dataclass(frozen=True)
class Synopsis:
    kind: Kind
    title: str
    summary: list[str]
    structure: list[str] = field(default_factory=list)
    notable: list[str] = field(default_factory=list)
    sample: str = ""
    """A raw sample the synopsis itself chose (binary-like and oversized output)."""


def looks_code(content: str) -> bool:
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


def json_synopsis(content: str) -> Synopsis | None:
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


def xml_synopsis(content: str) -> Synopsis | None:
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


def table_synopsis(content: str, delimiter: str, kind: Literal["csv", "tsv"]) -> Synopsis | None:
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
    if looks_code(content):
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


def yaml_synopsis(content: str) -> Synopsis | None:
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
