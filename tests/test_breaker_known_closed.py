"""A run that knows its model's circuit breaker closed (``middlewares/_breaker_gate.py``).

Since ``hartflow-breaker-in-model-call`` a run whose last check or call found the breaker closed with no failures
leaves the next check to the model activity's worker, which turns the call away when the breaker is not closed;
the decision comes from history alone. Runs recorded before replay their own rules: the known-closed skip by the
clock (``hartflow-breaker-known-closed``), then a check before every call (``hartflow-breaker-checks-every-call``).
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.model import ModelActivities
from middlewares.base import ModelRequest
from middlewares.llm_error_handling import CIRCUIT_OPEN_TEXT, LLMErrorHandlingMiddleware
from middlewares.patches import BREAKER_CHECKS_EVERY_CALL, BREAKER_IN_MODEL_CALL, BREAKER_KNOWN_CLOSED
from tests.support import StubRunContext, activity_error, start_run, thread_state
from vocabulary.breaker import (
    CLOSED_AT_KEY,
    CLOSED_FRESH_SECONDS,
    NOT_CLOSED_ERROR,
    still_closed,
    take_closed_at,
    turned_away_by_breaker,
)
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

Era = Literal["known-closed", "every-call", "in-model-call"]


class PatchRecordingContext(StubRunContext):
    """A run recorded in ``era``: which of the three breaker patches its history took."""

    def __init__(self, *checks: BreakerCheckResult, era: Era = "known-closed") -> None:
        self.reports: list[str] = []
        self.patches: list[str] = []
        self._taken = {
            "known-closed": {BREAKER_KNOWN_CLOSED},
            "every-call": {BREAKER_KNOWN_CLOSED, BREAKER_CHECKS_EVERY_CALL},
            "in-model-call": {BREAKER_KNOWN_CLOSED, BREAKER_CHECKS_EVERY_CALL, BREAKER_IN_MODEL_CALL},
        }[era]
        answers = list(checks)

        async def checked(_: BreakerCheckInput) -> BreakerCheckResult:
            return answers.pop(0) if len(answers) > 1 else answers[0]

        async def reported(input: BreakerReportInput) -> None:
            self.reports.append(input.report.outcome)

        super().__init__(activities={LLM_BREAKER_CHECK: checked, LLM_BREAKER_REPORT: reported})

    def patched(self, patch_id: str) -> bool:
        self.patches.append(patch_id)
        return patch_id in self._taken


def request(ctx: StubRunContext) -> ModelRequest:
    return ModelRequest([HumanMessage("hi")], None, [], ThreadState(), ctx, MODEL)


def vouching(ctx: StubRunContext, closed_at: datetime) -> Any:
    """A model handler whose answer's worker saw the breaker closed at ``closed_at`` (what the engine recorded in
    runs of the known-closed rule)."""

    async def handler(_: ModelRequest) -> AIMessage:
        ctx.breaker_closed_at[MODEL] = closed_at
        return AIMessage("fine")

    return handler


def checks(ctx: StubRunContext) -> int:
    return [name for name, _, _ in ctx.calls].count(LLM_BREAKER_CHECK)


def turned_away() -> ActivityError:
    """What the run sees of a gated model call its worker turned away."""
    return activity_error(ApplicationError("not closed", type=NOT_CLOSED_ERROR, non_retryable=True))


class GatedModel:
    """A model handler that records whether each call was gated, and turns away the gated calls it is told to."""

    def __init__(self, turn_away: int = 0) -> None:
        self.gated: list[bool] = []
        self._turn_away = turn_away

    async def __call__(self, request: ModelRequest) -> AIMessage:
        self.gated.append(request.breaker_gate)
        if request.breaker_gate and self._turn_away:
            self._turn_away -= 1
            raise turned_away()
        return AIMessage("fine")


# -- since hartflow-breaker-in-model-call -----------------------------------------------------------------------


async def test_a_run_that_found_the_breaker_closed_leaves_its_next_checks_to_the_calls() -> None:
    ctx = PatchRecordingContext(BreakerCheckResult(admitted=True), era="in-model-call")
    middleware, model = LLMErrorHandlingMiddleware(), GatedModel()
    for _ in range(4):
        assert (await middleware.wrap_model_call(request(ctx), model)).content == "fine"
    assert checks(ctx) == 1, "only the first call asks"
    assert model.gated == [False, True, True, True]
    assert ctx.reports == [] and ctx.breaker_known_closed == {MODEL}


async def test_a_turned_away_call_checks_and_calls_again_without_the_gate() -> None:
    """The breaker opened since the run's last call and a probe is free: the run checks, becomes the probe, and
    reports its success; the call after that checks again (the report changed the breaker)."""
    probe = BreakerCheckResult(admitted=True, probe=True, report_success=True, phase="half_open")
    ctx = PatchRecordingContext(
        BreakerCheckResult(admitted=True), probe, BreakerCheckResult(admitted=True), era="in-model-call"
    )
    middleware, model = LLMErrorHandlingMiddleware(), GatedModel(turn_away=1)
    for _ in range(4):
        assert (await middleware.wrap_model_call(request(ctx), model)).content == "fine"
    assert model.gated == [False, True, False, False, True]
    assert checks(ctx) == 3 and ctx.reports == ["success"]


async def test_a_turned_away_call_gets_the_circuit_open_fallback_and_the_next_call_checks() -> None:
    opened = BreakerCheckResult(admitted=False, phase="open", retry_in_seconds=30)
    ctx = PatchRecordingContext(BreakerCheckResult(admitted=True), opened, era="in-model-call")
    middleware, model = LLMErrorHandlingMiddleware(), GatedModel(turn_away=1)
    await middleware.wrap_model_call(request(ctx), model)
    assert (await middleware.wrap_model_call(request(ctx), model)).content == CIRCUIT_OPEN_TEXT
    assert (await middleware.wrap_model_call(request(ctx), model)).content == CIRCUIT_OPEN_TEXT
    assert model.gated == [False, True], "open and known not closed: no model call at all"
    assert checks(ctx) == 3 and MODEL not in ctx.breaker_known_closed


async def test_a_failure_report_or_a_success_the_breaker_must_hear_of_forgets_what_the_run_knew() -> None:
    ctx = PatchRecordingContext(BreakerCheckResult(admitted=True, report_success=True), era="in-model-call")
    middleware, model = LLMErrorHandlingMiddleware(), GatedModel()
    await middleware.wrap_model_call(request(ctx), model)
    await middleware.wrap_model_call(request(ctx), model)
    assert model.gated == [False, False] and ctx.reports == ["success", "success"]

    ctx = PatchRecordingContext(BreakerCheckResult(admitted=True), era="in-model-call")
    await middleware.wrap_model_call(request(ctx), model)
    assert ctx.breaker_known_closed == {MODEL}

    async def exhausted(_: ModelRequest) -> AIMessage:
        error = turned_away()
        error.__cause__ = ApplicationError("down", {"reason": "transient", "retriable": True}, type="ProviderError")
        raise error

    await middleware.wrap_model_call(request(ctx), exhausted)
    assert ctx.reports == ["failure"] and MODEL not in ctx.breaker_known_closed


def test_only_a_turned_away_call_reads_as_one() -> None:
    assert turned_away_by_breaker(turned_away())
    other = turned_away()
    other.__cause__ = ApplicationError("down", type="ProviderError")
    assert not turned_away_by_breaker(other) and not turned_away_by_breaker(RuntimeError("x"))


async def test_the_model_activity_turns_a_gated_call_away_without_calling_the_provider(tmp_path: Path) -> None:
    model = write_script(tmp_path, [answer("one"), answer("two")])
    asked: list[str] = []
    closed = True

    async def breaker_closed(name: str) -> bool:
        asked.append(name)
        return closed

    activities = ModelActivities(breaker_closed=breaker_closed)
    env = ActivityEnvironment()
    call = ModelCallInput(model=model, messages=[HumanMessage("hi")], breaker_gate=True)
    assert (await env.run(activities.invoke, call)).content == "one"
    closed = False
    with pytest.raises(ApplicationError) as refused:
        await env.run(activities.invoke, dataclasses.replace(call, call_index=1))
    assert (refused.value.type, refused.value.non_retryable) == (NOT_CLOSED_ERROR, True)
    ungated = await env.run(activities.invoke, dataclasses.replace(call, call_index=1, breaker_gate=False))
    assert ungated.content == "two", "the turned-away call did not use the script's answer"
    assert asked == [model, model]


async def test_a_new_run_checks_once_and_its_history_replays(client: Client, home: Path, temporal_address: str) -> None:
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
    assert [decision for decision, _, _ in breaker_decisions(events)] == ["checked"] + ["skipped"] * 4
    gates = [
        json.loads(e.activity_task_scheduled_event_attributes.input.payloads[0].data)["breaker_gate"]
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "model.invoke"
    ]
    assert gates == [False, True, True, True, True]
    stored = thread_state(home, handle.id.rsplit(":", 1)[-1])
    assert all(CLOSED_AT_KEY not in m.get("response_metadata", {}) for m in stored["messages"])


# -- runs recorded with the earlier rules ----------------------------------------------------------------------


async def test_a_fresh_closed_answer_skips_the_check_once() -> None:
    ctx = PatchRecordingContext(BreakerCheckResult(admitted=True))
    middleware = LLMErrorHandlingMiddleware()
    await middleware.wrap_model_call(request(ctx), vouching(ctx, NOW - timedelta(seconds=0.5)))
    assert checks(ctx) == 1, "nothing known yet: the first call asks"
    await middleware.wrap_model_call(request(ctx), vouching(ctx, NOW - timedelta(seconds=0.5)))
    assert checks(ctx) == 1
    assert ctx.patches == [BREAKER_IN_MODEL_CALL, BREAKER_CHECKS_EVERY_CALL, BREAKER_KNOWN_CLOSED]
    assert ctx.reports == []


async def test_a_run_recorded_since_the_clock_rule_was_withdrawn_checks_before_every_call() -> None:
    ctx = PatchRecordingContext(BreakerCheckResult(admitted=True), era="every-call")
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
