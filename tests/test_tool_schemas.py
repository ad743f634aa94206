"""The built-in tools as the model sees them, pinned to the exact JSON text.

DeerFlow's tool names, descriptions and argument schemas are a protocol: prompts, scripted models and recorded
transcripts depend on them, and a model request's preamble digest covers them. ``builtin_tool_schemas.json``
holds the text as it was when the schemas were written by hand; any change to it must be deliberate.
"""

from __future__ import annotations

import json
from pathlib import Path

from vocabulary.tools import BUILTIN_TOOLS

PINNED = Path(__file__).with_name("builtin_tool_schemas.json")


def test_builtin_tool_schemas_keep_their_exact_text() -> None:
    generated = json.dumps([tool.schema() for tool in BUILTIN_TOOLS], indent=2) + "\n"
    assert generated == PINNED.read_text(encoding="utf-8")
