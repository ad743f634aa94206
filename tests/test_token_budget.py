"""TokenBudget against DeerFlow's behaviour (``bytedance/deer-flow: backend/tests/test_token_budget_middleware.py``):
the baseline, the once-per-run warning injected on the next call, the hard stop, DeerFlow's texts and defaults, the
chain placement for the lead (off by default) and subagents (on by default), and a real run stopped by it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from pydantic import ValidationError
from temporalio.client import Client

from middlewares.base import ModelRequest
from middlewares.chain import build_lead_chain, build_subagent_chain, describe
from middlewares.run_settings import RunSettings
from middlewares.token_budget import TokenBudgetConfig, TokenBudgetMiddleware, default_subagent_budget
from tests.support import StubRunContext, start_run
from vocabulary.contracts import ModelCallInput
from vocabulary.state import ThreadState
from workers.testing import calls, make_config, running_worker, settle, tool_call, write_script
from workers.testing.history import history_events, scheduled_activities, scheduled_inputs


def _ai(message_id: str, input_tokens: int, output_tokens: int, **kwargs: Any) -> AIMessage:
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens, "total_tokens": input_tokens + output_tokens}
    return AIMessage(kwargs.pop("content", ""), id=message_id, usage_metadata=usage, **kwargs)  # type: ignore[arg-type]


def test_deerflows_defaults_and_threshold_rule() -> None:
    config = TokenBudgetConfig()
    assert (config.enabled, config.max_tokens, config.warn_threshold, config.hard_stop_threshold) == (
        False,
        200_000,
        0.8,
        1.0,
    )
    with pytest.raises(ValidationError, match="hard_stop_threshold must be >= warn_threshold"):
        TokenBudgetConfig(warn_threshold=0.9, hard_stop_threshold=0.5)
    with pytest.raises(ValidationError):
        TokenBudgetConfig(max_tokens=999)
    assert default_subagent_budget(summarization_enabled=True).max_tokens == 1_000_000
    assert default_subagent_budget(summarization_enabled=False) == TokenBudgetConfig(
        enabled=True, max_tokens=2_000_000, warn_threshold=0.7
    )


async def test_earlier_runs_are_the_baseline_then_a_warning_goes_to_the_next_call_once() -> None:
    middleware, ctx = TokenBudgetMiddleware(TokenBudgetConfig(enabled=True, max_tokens=1000)), StubRunContext()
    earlier = _ai("old", 5000, 5000)
    await middleware.before_agent(ThreadState(messages=[HumanMessage("a"), earlier]), ctx)
    messages: list[Any] = [HumanMessage("a"), earlier, HumanMessage("b"), _ai("m1", 700, 100)]
    assert await middleware.after_model(ThreadState(messages=messages), ctx) is None
    assert ctx.stop_reason is None

    seen: list[ModelRequest] = []

    async def model(request: ModelRequest) -> AIMessage:
        seen.append(request)
        return AIMessage("")

    request = ModelRequest(messages, None, [], ThreadState(), ctx, "m")
    await middleware.wrap_model_call(request, model)
    await middleware.wrap_model_call(request, model)
    warning = seen[0].messages[-1]
    assert warning.name == "budget_warning"
    assert warning.content == (
        "[TOKEN BUDGET WARNING] You have used 800 of your 1,000 total token budget (80%). Wrap up your current "
        "work and produce a final answer. Avoid starting new tool calls unless absolutely necessary."
    )
    assert seen[1].messages == messages, "drained: a retry does not see it again"
    messages.append(_ai("m2", 50, 0))
    assert await middleware.after_model(ThreadState(messages=messages), ctx) is None
    await middleware.wrap_model_call(request, model)
    assert seen[2].messages == messages, "one warning per run"


async def test_the_hard_stop_strips_tool_calls_and_caps_the_run() -> None:
    config = TokenBudgetConfig(enabled=True, max_tokens=100_000, max_output_tokens=1000)
    middleware, ctx = TokenBudgetMiddleware(config), StubRunContext()
    call = {"name": "bash", "args": {"command": "ls"}, "id": "c1"}
    last = _ai(
        "m1",
        10,
        1200,
        content="working",
        tool_calls=[call],
        response_metadata={"finish_reason": "tool_calls"},
    )
    update = await middleware.after_model(ThreadState(messages=[HumanMessage("go"), last]), ctx)
    assert update is not None
    [stopped] = update["messages"]
    assert stopped.id == "m1" and stopped.tool_calls == []
    assert stopped.content == (
        "working\n\n[TOKEN BUDGET EXCEEDED] The output token usage (1,200) has exceeded the safety limit (1,000). "
        "Producing final answer with results collected so far."
    )
    assert stopped.response_metadata["finish_reason"] == "stop"
    assert ctx.stop_reason == "token_capped"


async def test_usage_added_to_a_message_later_counts_its_growth() -> None:
    middleware, ctx = TokenBudgetMiddleware(TokenBudgetConfig(enabled=True, max_tokens=1000)), StubRunContext()
    await middleware.after_model(ThreadState(messages=[HumanMessage("go"), _ai("m1", 100, 0)]), ctx)
    grown = [HumanMessage("go"), _ai("m1", 990, 0), _ai("m2", 10, 10)]
    assert await middleware.after_model(ThreadState(messages=grown), ctx) is not None
    assert ctx.stop_reason == "token_capped", "100, then 890 more, then 20: over 1000"


def test_the_lead_runs_it_only_when_enabled_and_subagents_by_default() -> None:
    lead = describe(build_lead_chain(RunSettings()))
    assert "TokenBudget" not in lead
    on = describe(build_lead_chain(RunSettings.model_validate({"middlewares": {"token_budget": {"enabled": True}}})))
    assert on[on.index("LoopDetection") + 1] == "TokenBudget"
    sub = describe(build_subagent_chain(RunSettings()))
    assert sub[sub.index("LoopDetection") + 1] == "TokenBudget"
    off = RunSettings.model_validate({"middlewares": {"subagent_token_budget": {"enabled": False}}})
    assert "TokenBudget" not in describe(build_subagent_chain(off))


async def test_a_run_over_budget_answers_instead_of_calling_its_tools(
    client: Client, home: Path, temporal_address: str
) -> None:
    run = {"middlewares": {"token_budget": {"enabled": True, "max_tokens": 1000}}}
    config = make_config(home, temporal_address, run=run)
    usage = {"input_tokens": 700, "output_tokens": 150}
    over = {"input_tokens": 300, "output_tokens": 100}
    model = write_script(
        home,
        [
            {**calls(tool_call("ls", "c1", path="/mnt/user-data")), "usage_metadata": usage},
            {**calls(tool_call("ls", "c2", path="/mnt/user-data"), content="more"), "usage_metadata": over},
        ],
    )
    async with running_worker(client, config):
        handle = await start_run(client, config, "look around", model=model)
        view = await settle(handle)
        events = await history_events(handle)
        inputs = await scheduled_inputs(client, events, "model.invoke", ModelCallInput)
    assert view.status == "completed" and view.stop_reason == "token_capped"
    assert view.final_message.startswith("more\n\n[TOKEN BUDGET EXCEEDED] The total token usage (1,250)")
    assert [name for name, _ in scheduled_activities(events)].count("tool.execute") == 1
    assert inputs[1].messages[-1].content.startswith("[TOKEN BUDGET WARNING] You have used 850 of your 1,000")
