"""ToolProgress, pinned to DeerFlow's behaviour (``bytedance/deer-flow:
backend/tests/test_tool_progress_middleware.py``): the ACTIVE→WARNED→BLOCKED machine over ``deerflow_tool_meta``, its
strings, the per-run reset and hint queue, the chain placement, and a real run whose repeated not-found reads bring
the hint to the model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from temporalio.client import Client

from middlewares._tool_meta import TOOL_META_KEY, make_meta
from middlewares.base import ModelRequest, ToolCallRequest, ToolResult
from middlewares.chain import describe, runtime_base
from middlewares.run_settings import RunSettings
from middlewares.tool_progress import ToolPhase, ToolProgressConfig, ToolProgressMiddleware, format_hint
from tests.support import StubRunContext, start_run
from vocabulary.contracts import ModelCallInput
from vocabulary.state import ThreadState
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, write_script
from workers.testing.history import history_events, scheduled_inputs

NOT_FOUND = make_meta(
    status="error", source="tool_return", error_type="not_found", recommended_next_action="rewrite_query"
)
TRANSIENT = make_meta(
    status="error",
    source="exception",
    error_type="transient",
    recoverable_by_model=False,
    recommended_next_action="try_alternative",
)
AUTH = make_meta(
    status="error", source="exception", error_type="auth", recoverable_by_model=False, recommended_next_action="stop"
)
OK = make_meta(status="success", source="content_analysis")
PAGE = "alpha beta gamma delta epsilon zeta theta iota kappa lambda omicron sigma"


async def _call(
    mw: ToolProgressMiddleware, meta: dict[str, Any] | None, content: str = "x", name: str = "web_search"
) -> ToolResult:
    ran: list[str] = []

    async def tool(request: ToolCallRequest) -> ToolResult:
        ran.append(request.name)
        kwargs = {TOOL_META_KEY: meta} if meta is not None else {}
        return ToolMessage(content, tool_call_id="c", name=name, additional_kwargs=kwargs)

    request = ToolCallRequest({"name": name, "args": {}, "id": "c"}, None, ThreadState(), StubRunContext())
    result = await mw.wrap_tool_call(request, tool)
    if not ran:
        assert isinstance(result, ToolMessage) and result.content.startswith("[TOOL_BLOCKED] ")
    return result


async def _hints(mw: ToolProgressMiddleware) -> list[Any]:
    seen: list[ModelRequest] = []

    async def model(request: ModelRequest) -> AIMessage:
        seen.append(request)
        return AIMessage("ok")

    await mw.wrap_model_call(ModelRequest([HumanMessage("go")], None, [], ThreadState(), StubRunContext(), "m"), model)
    return seen[0].messages[1:]


async def test_recoverable_problems_warn_at_the_threshold_and_never_block() -> None:
    mw = ToolProgressMiddleware()
    for _ in range(2):
        await _call(mw, NOT_FOUND)
    assert mw._phases["web_search"] == ToolPhase("active", 2)
    await _call(mw, NOT_FOUND)
    assert mw._phases["web_search"].phase == "warned"
    for _ in range(4):
        await _call(mw, NOT_FOUND)
    assert mw._phases["web_search"].phase == "warned", "the model can fix it: no block"
    [hint] = await _hints(mw)
    assert (hint.name, hint.content) == (
        "progress_hint",
        "[PROGRESS HINT] The resource was not found repeatedly. "
        "Try rephrasing your search query with different keywords or approach.",
    )
    assert await _hints(mw) == [], "drained: the next call goes without it"


async def test_unrecoverable_problems_block_after_the_escalation_and_stop_signals_at_once() -> None:
    mw = ToolProgressMiddleware()
    for _ in range(5):
        await _call(mw, TRANSIENT)
    blocked = await _call(mw, TRANSIENT)
    assert isinstance(blocked, ToolMessage) and blocked.status == "error"
    assert blocked.content == "[TOOL_BLOCKED] Repeated transient failures — try a different approach."
    assert blocked.additional_kwargs[TOOL_META_KEY] == {
        "status": "error",
        "error_type": "blocked_by_progress_guard",
        "recoverable_by_model": True,
        "recommended_next_action": "summarize",
        "source": "progress_middleware",
    }
    other = await _call(mw, OK, name="bash")
    assert isinstance(other, ToolMessage) and other.content == "x", "only the failing tool is blocked"
    auth = ToolProgressMiddleware()
    await _call(auth, AUTH)
    blocked = await _call(auth, AUTH)
    assert isinstance(blocked, ToolMessage)
    assert blocked.content == "[TOOL_BLOCKED] Authentication failure — this tool cannot be used."


async def test_a_good_result_resets_and_near_duplicates_count_as_problems() -> None:
    mw = ToolProgressMiddleware()
    await _call(mw, NOT_FOUND)
    await _call(mw, NOT_FOUND)
    await _call(mw, OK, PAGE)
    assert mw._phases["web_search"].consecutive_problems == 0
    for _ in range(3):
        await _call(mw, OK, PAGE)  # the same page again and again
    assert mw._phases["web_search"].phase == "warned"
    assert format_hint(OK) == (
        "[PROGRESS HINT] The tool is returning duplicate results. "
        "Try rephrasing your query or using a different search term."
    )
    short = ToolProgressMiddleware()
    for _ in range(5):
        await _call(short, OK, "tiny")  # under ten words: never a duplicate
    assert short._phases["web_search"].phase == "active"


async def test_exempt_tools_and_results_without_a_verdict_are_not_tracked() -> None:
    mw = ToolProgressMiddleware()
    for _ in range(5):
        await _call(mw, AUTH, name="task")
        await _call(mw, None)
    assert mw._phases == {}


async def test_each_run_starts_active_and_continue_as_new_keeps_the_state() -> None:
    mw = ToolProgressMiddleware()
    for _ in range(3):
        await _call(mw, NOT_FOUND)
    carried = ToolProgressMiddleware()
    memory = mw.export_memory()
    assert memory is not None
    carried.import_memory(memory)
    assert carried._phases == mw._phases and carried._pending == mw._pending
    await mw.before_agent(ThreadState(), StubRunContext())
    assert mw._phases == {} and await _hints(mw) == []


def test_off_by_default_and_between_read_before_write_and_tool_error_handling() -> None:
    assert "ToolProgress" not in describe(runtime_base(RunSettings(), include_uploads=True))
    on = RunSettings.model_validate({"middlewares": {"tool_progress": {"enabled": True}}})
    names = describe(runtime_base(on, include_uploads=True))
    assert names.index("ReadBeforeWrite") + 1 == names.index("ToolProgress") < names.index("ToolErrorHandling")
    assert ToolProgressConfig().model_dump() == {
        "enabled": False,
        "stagnation_threshold": 3,
        "warn_escalation_count": 2,
        "inject_assessment": True,
        "jaccard_similarity_threshold": 0.8,
        "min_word_count_for_similarity": 10,
        "exempt_tools": ["ask_clarification", "write_todos", "present_files", "task"],
    }


@pytest.mark.parametrize("enabled", [True, False])
async def test_a_run_reading_a_missing_file_three_times_gets_the_hint(
    client: Client, home: Path, temporal_address: str, enabled: bool
) -> None:
    config = make_config(home, temporal_address, run={"middlewares": {"tool_progress": {"enabled": enabled}}})
    missing = "/mnt/user-data/workspace/missing.txt"
    script = [*(calls(tool_call("read_file", f"r{i}", path=missing)) for i in range(3)), answer("gave up")]
    async with running_worker(client, config):
        handle = await start_run(client, config, "read it", model=write_script(home, script))
        view = await settle(handle)
        inputs = await scheduled_inputs(client, await history_events(handle), "model.invoke", ModelCallInput)
    assert view.status == "completed"
    hints = [m for m in inputs[-1].messages if m.name == "progress_hint"]
    expected = (
        "[PROGRESS HINT] The resource was not found repeatedly. "
        "Try rephrasing your search query with different keywords or approach."
    )
    assert [h.content for h in hints] == ([expected] if enabled else [])
    assert not any(m.name == "progress_hint" for i in inputs[:-1] for m in i.messages)
