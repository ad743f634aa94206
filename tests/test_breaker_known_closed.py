"""The circuit-breaker check's known-closed skip (``middlewares/_breaker_gate.py``): runs that recorded it skip the
check while the previous agent call's worker vouches for a closed breaker (the rule with a fixed clock, the model
activity's side of it); runs since ``hartflow-breaker-checks-every-call`` check before every call, and their
history replays."""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.model import ModelActivities
from middlewares.base import ModelRequest
from middlewares.llm_error_handling import LLMErrorHandlingMiddleware
from middlewares.patches import BREAKER_CHECKS_EVERY_CALL, BREAKER_KNOWN_CLOSED
from tests.support import StubRunContext, start_run, thread_state
from vocabulary.breaker import CLOSED_AT_KEY, CLOSED_FRESH_SECONDS, still_closed, take_closed_at
from vocabulary.contracts import (
    LLM_BREAKER_CHECK,
    LLM_BREAKER_REPORT,
    BreakerCheckInput,
    BreakerCheckResult,
    BreakerReportInput,
    ModelCallInput,
)
from vocabulary.state import ThreadState
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, write_script
from workers.testing.history import history_events, replay

MODEL = "openai:gpt-4o-mini"
NOW = StubRunContext.NOW


class PatchRecordingContext(StubRunContext):
    """A run recorded with the skip (before ``hartflow-breaker-checks-every-call``), unless ``checks_every_call``."""

    def __init__(self, check: BreakerCheckResult, *, checks_every_call: bool = False) -> None:
        self.reports: list[str] = []
        self.patches: list[str] = []
        self._checks_every_call = checks_every_call

        async def checked(_: BreakerCheckInput) -> BreakerCheckResult:
            return check

        async def reported(input: BreakerReportInput) -> None:
            self.reports.append(input.report.outcome)

        super().__init__(activities={LLM_BREAKER_CHECK: checked, LLM_BREAKER_REPORT: reported})

    def patched(self, patch_id: str) -> bool:
        self.patches.append(patch_id)
        return patch_id != BREAKER_CHECKS_EVERY_CALL or self._checks_every_call


def request(ctx: StubRunContext) -> ModelRequest:
    return ModelRequest([HumanMessage("hi")], None, [], ThreadState(), ctx, MODEL)


def vouching(ctx: StubRunContext, closed_at: datetime) -> Any:
    """A model handler whose answer's worker saw the breaker closed at ``closed_at`` (what the engine records)."""

    async def handler(_: ModelRequest) -> AIMessage:
        ctx.breaker_closed_at[MODEL] = closed_at
        return AIMessage("fine")

    return handler


def checks(ctx: StubRunContext) -> int:
    return [name for name, _, _ in ctx.calls].count(LLM_BREAKER_CHECK)


async def test_a_fresh_closed_answer_skips_the_check_once() -> None:
    ctx = PatchRecordingContext(BreakerCheckResult(admitted=True))
    middleware = LLMErrorHandlingMiddleware()
    await middleware.wrap_model_call(request(ctx), vouching(ctx, NOW - timedelta(seconds=0.5)))
    assert checks(ctx) == 1, "nothing known yet: the first call asks"
    await middleware.wrap_model_call(request(ctx), vouching(ctx, NOW - timedelta(seconds=0.5)))
    assert checks(ctx) == 1 and ctx.patches == [BREAKER_CHECKS_EVERY_CALL, BREAKER_KNOWN_CLOSED]
    assert ctx.reports == []


async def test_a_run_since_the_clock_rule_was_withdrawn_checks_before_every_call() -> None:
    ctx = PatchRecordingContext(BreakerCheckResult(admitted=True), checks_every_call=True)
    middleware = LLMErrorHandlingMiddleware()
    for _ in range(3):
        await middleware.wrap_model_call(request(ctx), vouching(ctx, NOW - timedelta(seconds=0.5)))
    assert checks(ctx) == 3 and BREAKER_KNOWN_CLOSED not in ctx.patches


async def test_a_stale_or_future_answer_is_checked() -> None:
    for closed_at in (NOW - timedelta(seconds=CLOSED_FRESH_SECONDS), NOW + timedelta(milliseconds=1)):
        ctx = PatchRecordingContext(BreakerCheckResult(admitted=True))
        ctx.breaker_closed_at[MODEL] = closed_at
        await LLMErrorHandlingMiddleware().wrap_model_call(request(ctx), vouching(ctx, closed_at))
        assert checks(ctx) == 1 and BREAKER_KNOWN_CLOSED not in ctx.patches


async def test_a_failed_call_leaves_nothing_known() -> None:
    ctx = PatchRecordingContext(BreakerCheckResult(admitted=True))
    ctx.breaker_closed_at[MODEL] = NOW

    async def failing(_: ModelRequest) -> AIMessage:
        raise RuntimeError("not an activity error")

    middleware = LLMErrorHandlingMiddleware()
    with pytest.raises(RuntimeError):
        await middleware.wrap_model_call(request(ctx), failing)
    assert checks(ctx) == 0 and MODEL not in ctx.breaker_closed_at
    await middleware.wrap_model_call(request(ctx), vouching(ctx, NOW))
    assert checks(ctx) == 1


async def test_a_report_forgets_what_the_calls_worker_saw() -> None:
    """A success the breaker must hear of (it had failures): the answer's view predates that report."""
    ctx = PatchRecordingContext(BreakerCheckResult(admitted=True, report_success=True))
    await LLMErrorHandlingMiddleware().wrap_model_call(request(ctx), vouching(ctx, NOW))
    assert ctx.reports == ["success"] and MODEL not in ctx.breaker_closed_at


def test_the_answer_metadata_round_trip() -> None:
    metadata: dict[str, Any] = {"finish_reason": "stop", CLOSED_AT_KEY: NOW.timestamp()}
    assert take_closed_at(metadata) == NOW and metadata == {"finish_reason": "stop"}
    assert take_closed_at(metadata) is None
    assert still_closed(NOW, NOW) and not still_closed(NOW, NOW - timedelta(microseconds=1))
    assert not still_closed(NOW, NOW + timedelta(seconds=CLOSED_FRESH_SECONDS))


async def test_the_model_activity_says_when_its_worker_saw_the_breaker_closed_on_the_servers_clock(
    tmp_path: Path,
) -> None:
    model = write_script(tmp_path, [answer("one"), answer("two"), answer("three")])
    started = datetime(2030, 1, 1, tzinfo=UTC)
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, started_time=started)
    asked: list[str] = []
    asked_at = time.monotonic() - 0.25  # a quarter second before the activity starts, at least

    def closed_since(name: str) -> float | None:
        asked.append(name)
        return asked_at

    activities = ModelActivities(breaker_closed_since=closed_since)
    call = ModelCallInput(model=model, messages=[HumanMessage("hi")], report_breaker=True)
    message = await env.run(activities.invoke, call)
    seen = take_closed_at(message.response_metadata)
    assert seen is not None and started - timedelta(minutes=1) < seen <= started - timedelta(seconds=0.25)

    not_asked = await env.run(activities.invoke, dataclasses.replace(call, report_breaker=False, call_index=1))
    assert CLOSED_AT_KEY not in not_asked.response_metadata and asked == [model]
    unknown = await env.run(ModelActivities(breaker_closed_since=lambda _: None).invoke, call)
    assert CLOSED_AT_KEY not in unknown.response_metadata


async def test_a_new_run_checks_before_every_call_and_its_history_replays(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    (home / "a" / "b" / "c").mkdir(parents=True)
    turns = [calls(tool_call("ls", path=str(home / "a/b/c"[: 2 * turn]))) for turn in range(4)]
    model = write_script(home, [*turns, answer("done")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "list it", model=model)
        view = await settle(handle)
        events = await history_events(handle)
        await replay(client, handle)

    assert view.final_message == "done"
    decisions = breaker_decisions(events)
    assert [decision for decision, _, _ in decisions] == ["checked"] * 5
    assert all(closed_at is not None for _, closed_at, _ in decisions[1:]), "the answers still vouch (older runs)"
    stored = thread_state(home, handle.id.rsplit(":", 1)[-1])
    assert all(CLOSED_AT_KEY not in m.get("response_metadata", {}) for m in stored["messages"]), "never in state"


def breaker_decisions(events: list[Any]) -> list[tuple[str, datetime | None, datetime | None]]:
    """Per model call: whether the run checked the breaker first, what the previous answer vouched for, and when
    the workflow task that scheduled the call started (the run's clock then)."""
    decisions: list[tuple[str, datetime | None, datetime | None]] = []
    model_scheduled: set[int] = set()
    checked, closed_at, task_started = False, None, None
    for event in events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            task_started = event.event_time.ToDatetime().replace(tzinfo=UTC)
        elif kind == EventType.EVENT_TYPE_MARKER_RECORDED and "llm_breaker.check" in str(
            event.marker_recorded_event_attributes.details
        ):
            checked = True
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == "model.invoke":
                model_scheduled.add(event.event_id)
                decisions.append(("checked" if checked else "skipped", closed_at, task_started))
                checked = False
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attributes = event.activity_task_completed_event_attributes
            if attributes.scheduled_event_id in model_scheduled:
                result = json.loads(attributes.result.payloads[0].data)
                closed_at = take_closed_at(result.get("response_metadata") or {})
    return decisions
