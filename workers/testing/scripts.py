"""Scripts for the ``scripted:PATH`` model: the turns a test's model answers, one JSON file per script.

The Nth agent model call of a run takes the Nth response (the format, errors and delays included, is in
``activities/models/script.py``). ``answer`` ends the run with a text; ``calls`` asks for tools (``tool_call``
each); ``ask_clarification`` pauses the run for the user. ``write_script`` saves the responses and returns the
model spec to put in a config (``make_config(..., model=spec)``) or a run's input.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any


def unique(prefix: str) -> str:
    """``prefix`` and ten random hex digits: a name no other test (or earlier run on the same server) used."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def write_script(directory: Path, responses: list[dict[str, Any]], name: str | None = None) -> str:
    path = directory / (name or f"{unique('script')}.json")
    path.write_text(json.dumps({"responses": responses}), encoding="utf-8")
    return f"scripted:{path}"


def tool_call(name: str, call_id: str | None = None, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id or unique("call")}


def answer(text: str) -> dict[str, Any]:
    return {"content": text, "response_metadata": {"finish_reason": "stop"}}


def calls(*tool_calls: dict[str, Any], content: str = "") -> dict[str, Any]:
    return {
        "content": content,
        "tool_calls": list(tool_calls),
        "response_metadata": {"finish_reason": "tool_calls"},
    }


def ask_clarification(
    question: str = "Which colour?",
    *,
    call_id: str | None = "ask1",
    options: list[str] | None = None,
    clarification_type: str = "approach_choice",
) -> dict[str, Any]:
    """A scripted model turn that asks the user (``ask_clarification``); ``options`` only when given."""
    args: dict[str, Any] = {"question": question, "clarification_type": clarification_type}
    if options:
        args["options"] = options
    return calls(tool_call("ask_clarification", call_id, **args))
