"""The soak's runs: a scripted model per run whose final state is known, and the check of that state.

Each kind exercises one path a fault can cut: a tool call, parallel tool calls, a tool output past the payload
threshold (a claim-checked payload in S3), a subagent (a child workflow), a clarification answered by the CLI,
by the ``clarification_reply`` signal or by ``langgraph-sdk`` through an API server, and a cancellation of a run
whose tool call is in flight. Tool calls sleep a little, so faults land inside them.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Kind = Literal["tool", "parallel", "large", "subagent", "clarify_cli", "clarify_signal", "clarify_sdk", "cancel"]
KINDS: tuple[Kind, ...] = (
    "tool", "parallel", "large", "subagent", "clarify_cli", "clarify_signal", "clarify_sdk", "cancel",
)  # fmt: skip
Start = Literal["cli", "sdk"]
LARGE_BYTES = 60000


@dataclass
class Scenario:
    index: int
    kind: Kind
    start: Start
    thread_id: str
    model: str
    prompt: str
    final: str
    tool_call_ids: list[str]
    reply: str | None = None
    outcome: dict[str, Any] = field(default_factory=dict)
    """What the driver saw: status, timings, the SSE consumers' event ids."""

    @property
    def expected_status(self) -> str:
        return "cancelled" if self.kind == "cancel" else "completed"


def _calls(*tool_calls: dict[str, Any]) -> dict[str, Any]:
    return {"content": "", "tool_calls": list(tool_calls), "response_metadata": {"finish_reason": "tool_calls"}}


def _call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id}


def _responses(kind: Kind, tag: str, final: str) -> list[dict[str, Any]]:
    bash = f"sleep 1; echo {tag}"
    first: dict[str, Any]
    if kind == "tool":
        first = _calls(_call("bash", f"{tag}-bash", command=bash))
    elif kind == "parallel":
        first = _calls(
            _call("bash", f"{tag}-bash", command=bash),
            _call("write_file", f"{tag}-write", path=f"/mnt/user-data/outputs/{tag}.txt", content=tag),
            _call("bash", f"{tag}-bash2", command=f"sleep 1; echo {tag} again"),
        )
    elif kind == "large":
        first = _calls(_call("bash", f"{tag}-big", command=f"sleep 1; head -c {LARGE_BYTES} /dev/zero | tr '\\0' x"))
    elif kind == "subagent":
        first = _calls(
            _call("task", f"{tag}-task", description=f"job {tag}", prompt="look it up", subagent_type="general-purpose")
        )
    elif kind == "cancel":
        first = _calls(_call("bash", f"{tag}-hang", command="sleep 3600"))
    else:
        first = _calls(_call("ask_clarification", f"{tag}-ask", question=f"Which way for {tag}?",
                             clarification_type="missing_info"))  # fmt: skip
    return [first, {"content": final, "response_metadata": {"finish_reason": "stop"}}]


def make_scenario(index: int, rng: random.Random, directory: Path, seed: int) -> Scenario:
    kind = KINDS[index % len(KINDS)] if index < len(KINDS) else rng.choice(KINDS)
    start: Start = "sdk" if kind == "clarify_sdk" else rng.choice(("cli", "sdk"))
    tag = f"s{seed}-r{index}"
    final = f"done with {tag}"
    responses = _responses(kind, tag, final)
    path = directory / f"{tag}.json"
    path.write_text(json.dumps({"responses": responses}))
    ids = [call["id"] for call in responses[0]["tool_calls"]]
    reply = f"go left, {tag}" if kind.startswith("clarify") else None
    return Scenario(index, kind, start, f"soak-{tag}", f"scripted:{path}", f"please work on {tag}", final, ids, reply)


def state_problems(scenario: Scenario, messages: list[dict[str, Any]]) -> list[str]:
    """Where the committed messages differ from what the script implies (empty: they match).

    Every run: the prompt once, no message id twice, each scripted tool call made once and answered once. A
    completed run also ends with the script's final answer, and a clarified one holds the reply once."""
    problems: list[str] = []
    ids = [m.get("id") for m in messages]
    if len(set(ids)) != len(ids):
        problems.append(f"duplicated message ids: {sorted(i for i in set(ids) if ids.count(i) > 1)}")
    prompts = [m for m in messages if m["type"] == "human" and m.get("text") == scenario.prompt]
    if len(prompts) != 1:
        problems.append(f"the prompt is there {len(prompts)} times")
    made = [call["id"] for m in messages if m["type"] == "ai" for call in m.get("tool_calls") or []]
    answered = [m.get("tool_call_id") for m in messages if m["type"] == "tool"]
    if made != scenario.tool_call_ids:
        problems.append(f"tool calls {made}, the script made {scenario.tool_call_ids}")
    expected_answers = scenario.tool_call_ids  # the clarification question is its call's tool output
    if scenario.kind == "cancel":
        expected_answers = [i for i in scenario.tool_call_ids if i in answered]  # at most once: checked below
    if sorted(answered) != sorted(expected_answers) or len(set(answered)) != len(answered):
        problems.append(f"tool outputs for {answered}, expected each of {expected_answers} once")
    replies = [m for m in messages if m["type"] == "human" and "human_input_response" in m["additional_kwargs"]]
    if scenario.reply is not None and [r["additional_kwargs"]["human_input_response"]["value"] for r in replies] != [
        scenario.reply
    ]:
        problems.append(f"replies stored {[r['text'] for r in replies]}, expected {scenario.reply!r} once")
    last = messages[-1] if messages else {}
    if scenario.expected_status == "completed" and (last.get("type"), last.get("text")) != ("ai", scenario.final):
        problems.append(f"the last message is {last.get('type')} {last.get('text')!r}, not {scenario.final!r}")
    finals = [m for m in messages if m["type"] == "ai" and m.get("text") == scenario.final]
    if len(finals) > (1 if scenario.expected_status == "completed" else 0):
        problems.append(f"the final answer is there {len(finals)} times")
    return problems
