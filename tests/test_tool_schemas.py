"""The built-in tools as the model sees them, pinned to the exact JSON text.

DeerFlow's tool names, descriptions and argument schemas are a protocol: prompts, scripted models and recorded
transcripts depend on them, and a model request's preamble digest covers them. ``builtin_tool_schemas.json``
holds the text as it was when the schemas were written by hand; any change to it must be deliberate.
The schemas are generated from the argument models the activities validate with, so what a tool is shown to
accept and what it accepts cannot drift apart.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from activities.sandbox_tools import TOOLS
from vocabulary.tool_args import GlobArgs, GrepArgs, parameters
from vocabulary.tools import BUILTIN_TOOLS
from vocabulary.web_tools import WEB_TOOLS

PINNED = Path(__file__).with_name("builtin_tool_schemas.json")


def test_builtin_tool_schemas_keep_their_exact_text() -> None:
    """The built-in tools, then the web tools (``vocabulary/web_tools.py``) a ``tools:`` entry can name."""
    generated = json.dumps([tool.schema() for tool in (*BUILTIN_TOOLS, *WEB_TOOLS)], indent=2) + "\n"
    assert generated == PINNED.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_each_sandbox_tool_is_advertised_from_the_model_it_validates_with(name: str) -> None:
    [spec] = [tool for tool in BUILTIN_TOOLS if tool.name == name]
    assert spec.sandbox
    assert spec.parameters == parameters(TOOLS[name].args)


def test_the_unadvertised_search_limits_are_still_accepted() -> None:
    glob = GlobArgs.model_validate({"pattern": "*", "path": "/mnt", "include_dirs": True, "max_results": 5})
    assert (glob.include_dirs, glob.max_results) == (True, 5)
    assert GrepArgs.model_validate({"pattern": "x", "path": "/mnt", "max_results": 7}).max_results == 7
