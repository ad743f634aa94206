"""The one workload every system runs: N turns of one cheap tool call each, then a final answer.

Fairness lives here: hartflow's scripted model file, the LangChain/Deep Agents fake model and the floor's canned
model activity all answer from :func:`responses`, and every system's tool lists the same (empty) directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TOOL = "ls"
WORKSPACE = "/mnt/user-data/workspace"
"""The path the model asks to list: hartflow maps it to the thread's workspace; the peers list a real empty
directory of their own, so every tool call does the same work (one ``listdir``)."""
FINAL_ANSWER = "done"
PROMPT = "List the workspace, again and again."


def responses(turns: int, run_tag: str = "r", tool: str = TOOL) -> list[dict[str, Any]]:
    """``turns`` model responses with one ``ls`` call each, then the final answer (hartflow's script format).

    Call ids are unique per turn and per run (``run_tag``), as a provider's would be. ``tool`` renames the call
    for a system whose own built-in ``ls`` would otherwise shadow the benchmark's tool.
    """
    calls = [
        {
            "content": "",
            "tool_calls": [{"name": tool, "args": {"path": WORKSPACE}, "id": f"call_{run_tag}_{turn}"}],
            "response_metadata": {"finish_reason": "tool_calls"},
        }
        for turn in range(turns)
    ]
    return [*calls, {"content": FINAL_ANSWER, "response_metadata": {"finish_reason": "stop"}}]


def clarification_responses(rounds: int) -> list[dict[str, Any]]:
    """``rounds`` clarification questions (each pauses a hartflow run until a reply), then the final answer."""
    asks = [
        {
            "content": "",
            "tool_calls": [
                {
                    "name": "ask_clarification",
                    "args": {"question": f"Which one ({index})?", "clarification_type": "approach_choice"},
                    "id": f"ask_{index}",
                }
            ],
            "response_metadata": {"finish_reason": "tool_calls"},
        }
        for index in range(rounds)
    ]
    return [*asks, {"content": FINAL_ANSWER, "response_metadata": {"finish_reason": "stop"}}]


def write_script(directory: Path, entries: list[dict[str, Any]], name: str) -> str:
    """The ``scripted:PATH`` model spec of a script file holding ``entries``."""
    path = directory / f"{name}.json"
    path.write_text(json.dumps({"responses": entries}), encoding="utf-8")
    return f"scripted:{path}"


def ai_messages(turns: int, run_tag: str = "r", tool: str = TOOL) -> list[Any]:
    """:func:`responses` as langchain ``AIMessage`` objects, for the peers' fake chat models."""
    from langchain_core.messages import AIMessage

    return [
        AIMessage(
            content=entry["content"],
            tool_calls=[{**call, "type": "tool_call"} for call in entry.get("tool_calls", [])],
            response_metadata=entry["response_metadata"],
        )
        for entry in responses(turns, run_tag, tool)
    ]
