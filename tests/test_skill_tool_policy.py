"""SkillToolPolicy, pinned to DeerFlow's behaviour (``bytedance/deer-flow:
backend/tests/test_skill_tool_policy_middleware.py``): the hooks with a stub policy activity, the activity on a real
skills folder, and real runs where a slash-activated skill, or one the model read, limits the tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.skill_catalog import SkillActivities
from activities.skills import SkillsSettings
from middlewares.base import Command, ModelRequest, ToolCallRequest, ToolResult
from middlewares.skill_activation import Activation, SkillActivationMiddleware
from middlewares.skill_tool_policy import NOT_ALLOWED, SkillToolPolicyMiddleware
from tests.support import StubRunContext, activity_error, start_run, thread_state
from vocabulary.contracts import SKILL_TOOL_POLICY, ModelCallInput, SkillToolPolicyInput, SkillToolPolicyResult
from vocabulary.state import ThreadState
from vocabulary.tools import ToolSpec
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, unique, write_script
from workers.testing.history import history_events, scheduled_inputs

PDF = "/mnt/skills/public/pdf/SKILL.md"
TOOLS = ["bash", "write_file", "read_file", "task", "tool_search", "web_search"]


def _ctx(decide: Any = None) -> StubRunContext:
    async def tool_policy(arg: SkillToolPolicyInput) -> SkillToolPolicyResult:
        if isinstance(decide, Exception):
            raise activity_error(decide, SKILL_TOOL_POLICY)
        return decide if isinstance(decide, SkillToolPolicyResult) else SkillToolPolicyResult(decide)

    return StubRunContext(activities={SKILL_TOOL_POLICY: tool_policy})


def _policy(slash: str | None = None) -> SkillToolPolicyMiddleware:
    activation = SkillActivationMiddleware()
    if slash is not None:
        activation.import_memory(
            {"run_key": "h1", "activation": vars(Activation("pdf", "public", slash, "c", "sha", ""))}
        )
    return SkillToolPolicyMiddleware(activation)


def _state(*paths: str) -> ThreadState:
    return ThreadState(skill_context=[{"name": "x", "path": p, "description": "", "loaded_at": 0} for p in paths])


async def _tools_seen(middleware: SkillToolPolicyMiddleware, ctx: StubRunContext, state: ThreadState) -> list[str]:
    seen: list[ModelRequest] = []

    async def model(request: ModelRequest) -> AIMessage:
        seen.append(request)
        return AIMessage("ok")

    tools = [ToolSpec(name=name, description=name, parameters={}) for name in TOOLS]
    await middleware.wrap_model_call(ModelRequest([], None, tools, state, ctx, "m"), model)
    return [tool.name for tool in seen[0].tools]


async def _call(
    middleware: SkillToolPolicyMiddleware, ctx: StubRunContext, state: ThreadState, name: str
) -> ToolResult:
    async def tool(request: ToolCallRequest) -> ToolResult:
        return ToolMessage("ran", tool_call_id=request.call_id, name=name)

    return await middleware.wrap_tool_call(
        ToolCallRequest({"name": name, "args": {}, "id": "c1"}, None, state, ctx), tool
    )


async def test_no_active_skill_changes_nothing_and_asks_nothing() -> None:
    ctx = _ctx(["bash"])
    assert await _tools_seen(_policy(), ctx, ThreadState()) == TOOLS
    assert isinstance(result := await _call(_policy(), ctx, ThreadState(), "write_file"), ToolMessage)
    assert result.content == "ran" and ctx.calls == []


@pytest.mark.parametrize(
    ("decision", "expected"),
    [
        (["bash", "task"], ["bash", "read_file", "task", "tool_search"]),  # declared, plus the framework tools
        (None, TOOLS),  # no active skill declares allowed-tools: legacy, all tools
        ([], ["read_file", "tool_search"]),  # declared empty: framework tools only
        (SkillToolPolicyResult(failed=True), ["read_file", "tool_search"]),  # nothing authorised: fail closed
        (RuntimeError("skills unreadable"), ["read_file", "tool_search"]),  # the activity failed: fail closed
    ],
)
async def test_a_read_skill_filters_the_model_tools(decision: Any, expected: list[str]) -> None:
    ctx = _ctx(decision)
    assert await _tools_seen(_policy(), ctx, _state(PDF)) == expected
    [(_, arg, _)] = ctx.calls
    assert arg == SkillToolPolicyInput([PDF], None, "default")


async def test_the_slash_skill_dominates_what_was_read() -> None:
    ctx = _ctx(["bash"])
    await _tools_seen(_policy(slash=PDF), ctx, _state("/mnt/skills/public/other/SKILL.md"))
    assert ctx.calls[0][1].paths == [PDF]


async def test_a_call_outside_the_policy_is_blocked_with_deerflows_text_and_reuses_the_decision() -> None:
    ctx, middleware, state = _ctx(["bash"]), _policy(), _state(PDF)
    await _tools_seen(middleware, ctx, state)
    blocked = await _call(middleware, ctx, state, "write_file")
    assert isinstance(blocked, ToolMessage) and blocked.status == "error"
    assert blocked.content == NOT_ALLOWED.format(name="write_file")
    assert blocked.content == "Error: Tool 'write_file' is not allowed by the active skill policy."
    allowed = await _call(middleware, ctx, state, "bash")
    assert isinstance(allowed, ToolMessage) and allowed.content == "ran"
    assert len(ctx.calls) == 1, "the tool calls reuse the model step's decision"
    other = _state("/mnt/skills/public/other/SKILL.md")
    await _call(middleware, ctx, other, "bash")
    assert len(ctx.calls) == 2, "another set of active skills is decided afresh"


async def test_tool_search_results_lose_what_the_policy_removed() -> None:
    ctx, middleware, state = _ctx(["bash"]), _policy(), _state(PDF)
    schemas = [{"type": "function", "function": {"name": n}} for n in ("bash", "web_search")]

    async def search(request: ToolCallRequest) -> ToolResult:
        found = ToolMessage(json.dumps(schemas), tool_call_id="c1", name="tool_search")
        return Command({"promoted": {"catalog_hash": "h", "names": ["bash", "web_search"]}, "messages": [found]})

    request = ToolCallRequest({"name": "tool_search", "args": {}, "id": "c1"}, None, state, ctx)
    result = await middleware.wrap_tool_call(request, search)
    assert isinstance(result, Command)
    assert result.update["promoted"] == {"catalog_hash": "h", "names": ["bash"]}
    assert json.loads(result.update["messages"][0].content) == schemas[:1]

    async def odd(request: ToolCallRequest) -> ToolResult:
        return ToolMessage("[]", tool_call_id="c1", name="tool_search")

    unchecked = await middleware.wrap_tool_call(request, odd)
    assert isinstance(unchecked, ToolMessage) and unchecked.content == (
        "Error: tool_search returned a result that could not be validated against the active skill policy."
    )


def test_the_activity_resolves_paths_to_enabled_available_skills(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    for name, tools in (("pdf", "[bash, task]"), ("docs", "[web_search]"), ("legacy", None), ("off", "[ls]")):
        folder = root / "public" / name
        folder.mkdir(parents=True)
        declared = f"allowed-tools: {tools}\n" if tools else ""
        (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: d\n{declared}---\nbody\n", encoding="utf-8")
    policy = SkillActivities(root, SkillsSettings(disabled=["off"])).tool_policy
    env = ActivityEnvironment()

    def decide(*names: str, available: list[str] | None = None) -> SkillToolPolicyResult:
        paths = [f"/mnt/skills/public/{n}/SKILL.md" for n in names]
        return env.run(policy, SkillToolPolicyInput(paths, available))

    assert decide("pdf", "docs") == SkillToolPolicyResult(["bash", "task", "web_search"])
    assert decide("legacy") == SkillToolPolicyResult(None)
    assert decide("legacy", "pdf") == SkillToolPolicyResult(["bash", "task"]), "a legacy skill adds nothing"
    assert decide("unknown", "pdf") == SkillToolPolicyResult(["bash", "task"]), "an unknown path is skipped"
    assert decide("off").failed and decide("unknown").failed
    assert decide("pdf", available=["docs"]).failed


async def test_a_run_with_a_slash_skill_gets_only_its_tools(client: Client, home: Path, temporal_address: str) -> None:
    config = make_config(home, temporal_address)
    folder = home / "skills" / "public" / "pdf"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        "---\nname: pdf\ndescription: Reads PDFs\nallowed-tools: [bash]\n---\nUse bash.\n", encoding="utf-8"
    )
    thread_id = unique("thread")
    script = [calls(tool_call("ls", "l1", path="/mnt/user-data/workspace")), answer("done")]
    async with running_worker(client, config):
        model = write_script(home, script)
        handle = await start_run(client, config, "/pdf read it", model=model, thread_id=thread_id)
        view = await settle(handle)
        events = await history_events(handle)
        first, second = await scheduled_inputs(client, events, "model.invoke", ModelCallInput)
    assert view.status == "completed"
    assert sorted(t["function"]["name"] for t in first.tools) == ["bash", "read_file"]
    assert sorted(t["function"]["name"] for t in second.tools) == ["bash", "read_file"]
    results = {m["tool_call_id"]: m for m in thread_state(home, thread_id)["messages"] if m["type"] == "tool"}
    assert results["l1"]["content"] == "Error: Tool 'ls' is not allowed by the active skill policy."
