"""LLMErrorHandling on the real dev server: Temporal retries per DeerFlow's classification, fallbacks that end the run
as ``error``, and the circuit breaker shared through its entity workflow."""

from __future__ import annotations

import contextlib
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode

from middlewares.llm_error_handling import AUTH_TEXT, BURST_TEXT, CIRCUIT_OPEN_TEXT, UNAVAILABLE_TEXT
from tests.support import start_run, thread_state, wait_for_history_event
from vocabulary.breaker import (
    ACQUIRE_UPDATE,
    NOT_CLOSED_ERROR,
    REPORT_SIGNAL,
    STATE_QUERY,
    WORKFLOW_NAME,
    Admission,
    BreakerReport,
    BreakerState,
    ProbeRequest,
    breaker_workflow_id,
)
from vocabulary.contracts import LLM_BREAKER_CHECK, LLM_BREAKER_REPORT
from workers.config import HartflowConfig
from workers.testing import answer, ask_clarification, make_config, running_worker, settle, write_script
from workers.testing.history import history_events, replay, scheduled_activities
from workflows.run import RunView


def llm_config(
    home: Path,
    address: str,
    *,
    attempts: int = 3,
    threshold: int = 5,
    recovery: float = 60,
    on_open: str = "fallback",
) -> HartflowConfig:
    """Tiny backoff so retries cost milliseconds; the breaker as each test needs it."""
    return make_config(
        home,
        address,
        run={
            "middlewares": {
                "llm_error_handling": {
                    "llm_call": {
                        "retry_max_attempts": attempts,
                        "retry_base_delay_ms": 5,
                        "retry_cap_delay_ms": 20,
                        "burst_retry_base_delay_ms": 10,
                    },
                    "circuit_breaker": {
                        "failure_threshold": threshold,
                        "recovery_timeout_sec": recovery,
                        "on_open": on_open,
                    },
                }
            }
        },
    )


def error(status: int, message: str, times: int = 1, **extra: Any) -> dict[str, Any]:
    return {"error": {"status": status, "message": message, **extra}, "times": times}


def model_attempts(events: list[Any]) -> list[Any]:
    """The ActivityTaskStarted event of every model.invoke (history keeps only the attempt that ended it)."""
    scheduled = {e.event_id for e in events if is_model_scheduled(e)}
    return [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id in scheduled
    ]


def is_model_scheduled(event: Any) -> bool:
    return bool(
        event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and event.activity_task_scheduled_event_attributes.activity_type.name == "model.invoke"
    )


def breaker_markers(events: list[Any]) -> list[str]:
    """The circuit-breaker local activities of the run (each recorded as one marker), in order."""
    result = []
    for event in events:
        attributes = event.marker_recorded_event_attributes
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED and attributes.marker_name == "core_local_activity":
            activity_type = json.loads(attributes.details["data"].payloads[0].data)["activity_type"]
            if activity_type.startswith("llm_breaker."):
                result.append(activity_type)
    return result


async def llm_retry_events(handle: WorkflowHandle[Any, Any]) -> list[dict[str, Any]]:
    events = await handle.query("events", 0, result_type=list[dict[str, Any]])
    return [
        {k: e[k] for k in ("attempt", "max_attempts", "wait_ms", "reason", "message")}
        for e in events
        if e["kind"] == "llm_retry"
    ]


def ai_messages(home: Path, handle: WorkflowHandle[Any, Any]) -> list[dict[str, Any]]:
    """The AI messages of the run's thread, as committed to the thread store."""
    thread_id = handle.id.rpartition(":")[2]
    messages = thread_state(home, thread_id)["messages"]
    return [m for m in messages if m["type"] == "ai"]


def rewrite(model: str, responses: list[dict[str, Any]]) -> None:
    """Give the model a new script: the same spec (so the same breaker), answering differently from now on."""
    path = Path(model.removeprefix("scripted:"))
    assert write_script(path.parent, responses, name=path.name) == model


async def breaker_state(client: Client, model: str) -> BreakerState:
    handle = client.get_workflow_handle(breaker_workflow_id(model))
    state: BreakerState = await handle.query(STATE_QUERY, result_type=BreakerState)
    return state


async def report_to_breaker(
    client: Client, config: HartflowConfig, model: str, report: BreakerReport
) -> WorkflowHandle[Any, Any]:
    """Send ``report`` to the breaker of ``model`` as a worker does (signal-with-start: the first one creates it)."""
    return await client.start_workflow(
        WORKFLOW_NAME,
        BreakerState(),
        id=breaker_workflow_id(model),
        task_queue=config.temporal.task_queue,
        start_signal=REPORT_SIGNAL,
        start_signal_args=[report],
    )


async def run_once(
    client: Client, config: HartflowConfig, model: str
) -> tuple[RunView, list[Any], WorkflowHandle[Any, RunView]]:
    handle = await start_run(client, config, "hello", model=model)
    view = await settle(handle)
    return view, await history_events(handle), handle


async def test_transient_errors_are_retried_by_temporal_and_reported_as_progress(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = llm_config(home, temporal_address)
    model = write_script(home, [error(503, "upstream unavailable", times=2), answer("recovered")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "hello", model=model)
        view = await settle(handle)
        events = await history_events(handle)
        retries = await llm_retry_events(handle)

    assert (view.status, view.final_message) == ("completed", "recovered")
    [started] = model_attempts(events)
    attributes = started.activity_task_started_event_attributes
    assert attributes.attempt == 3, "one model.invoke, completed by its third attempt"
    failure = attributes.last_failure
    assert failure.message == "upstream unavailable"
    assert failure.application_failure_info.type == "InternalServerError"
    assert not failure.application_failure_info.non_retryable
    [details] = await client.data_converter.decode(list(failure.application_failure_info.details.payloads))
    assert (details["reason"], details["attempt"], details["max_attempts"]) == ("transient", 2, 3)
    assert 5 <= details["wait_ms"] <= 20

    assert [(r["attempt"], r["max_attempts"], r["reason"]) for r in retries] == [
        (1, 3, "transient"),
        (2, 3, "transient"),
    ]
    assert retries[0]["message"] == "LLM request retry 1/3: provider request failed temporarily. Retrying in 1s."
    signals = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
    assert [s.workflow_execution_signaled_event_attributes.signal_name for s in signals] == ["llm_retry"] * 2


async def test_an_empty_generations_index_error_is_transient_retried_then_the_unavailable_fallback(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = llm_config(home, temporal_address)
    empty = {"error": {"type": "IndexError", "message": "list index out of range"}, "times": 3}
    model = write_script(home, [empty])
    async with running_worker(client, config):
        handle = await start_run(client, config, "hello", model=model)
        view = await settle(handle)
        events = await history_events(handle)
        retries = await llm_retry_events(handle)

    assert (view.status, view.final_message) == ("error", UNAVAILABLE_TEXT)
    [started] = model_attempts(events)
    assert started.activity_task_started_event_attributes.attempt == 3, "retried as transient, then exhausted"
    assert [(r["attempt"], r["reason"]) for r in retries] == [(1, "transient"), (2, "transient")]
    fallback = ai_messages(home, handle)[-1]["additional_kwargs"]
    assert (fallback["error_type"], fallback["error_reason"]) == ("IndexError", "transient")


async def test_retry_after_is_honoured_as_the_next_retry_delay(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = llm_config(home, temporal_address)
    model = write_script(home, [error(429, "slow down", retry_after=0.4), answer("ok")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "hello", model=model)
        view = await settle(handle)
        events = await history_events(handle)
        retries = await llm_retry_events(handle)

    assert view.status == "completed"
    [started] = model_attempts(events)
    attributes = started.activity_task_started_event_attributes
    assert attributes.attempt == 2
    assert attributes.last_failure.application_failure_info.next_retry_delay.ToTimedelta() == timedelta(seconds=0.4)
    scheduled = next(e for e in events if e.event_id == attributes.scheduled_event_id)
    waited = started.event_time.ToDatetime() - scheduled.event_time.ToDatetime()
    assert waited >= timedelta(seconds=0.4), "the second attempt cannot start before the provider's Retry-After"
    assert [(r["wait_ms"], r["reason"]) for r in retries] == [(400, "transient")]


async def test_auth_errors_fall_back_without_retry_and_end_the_run_as_error(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = llm_config(home, temporal_address, threshold=1)
    model = write_script(home, [error(401, "Unauthorized: invalid api key"), answer("never")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "hello", model=model)
        view = await settle(handle)
        result = await handle.result()
        events = await history_events(handle)

    assert (view.status, view.final_message) == ("error", AUTH_TEXT)
    assert result.status == "error", "a fallback ends the run as error, not as a failed workflow"
    [started] = model_attempts(events)
    assert started.activity_task_started_event_attributes.attempt == 1
    assert any(e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED for e in events)
    assert (
        ai_messages(home, handle)[-1]["additional_kwargs"].items()
        >= {
            "deerflow_error_fallback": True,
            "error_type": "AuthenticationError",
            "error_reason": "auth",
            "error_detail": "Unauthorized: invalid api key",
        }.items()
    )
    # Non-retriable errors never count towards the breaker (threshold 1 here): nothing was reported.
    assert LLM_BREAKER_REPORT not in breaker_markers(events)


async def test_burst_rate_gets_at_most_two_attempts_and_never_trips_the_breaker(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = llm_config(home, temporal_address, threshold=1)
    model = write_script(home, [error(429, "limit_burst_rate: rate increased too quickly", times=5), answer("no")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "hello", model=model)
        view = await settle(handle)
        events = await history_events(handle)
        retries = await llm_retry_events(handle)

    assert (view.status, view.final_message) == ("error", BURST_TEXT)
    [started] = model_attempts(events)
    assert started.activity_task_started_event_attributes.attempt == 2
    assert [(r["attempt"], r["max_attempts"], r["reason"]) for r in retries] == [(1, 2, "burst_rate")]
    assert retries[0]["message"].startswith("LLM request retry 1/2: provider is throttling request burst rate.")
    with pytest.raises(RPCError) as missing:
        await breaker_state(client, model)
    assert missing.value.status == RPCStatusCode.NOT_FOUND, "burst exhaustion must not create or trip a breaker"


async def test_a_healthy_breaker_costs_one_marker_per_model_call(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = llm_config(home, temporal_address)
    model = write_script(home, [answer("hi")])
    async with running_worker(client, config):
        view, events, _ = await run_once(client, config, model)

    assert view.status == "completed"
    assert breaker_markers(events) == [LLM_BREAKER_CHECK]
    assert not [name for name, _ in scheduled_activities(events) if name.startswith("llm_breaker.")]


async def test_the_breaker_opens_after_five_exhausted_calls_across_runs_and_workers(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = llm_config(home, temporal_address, attempts=2)
    failing = write_script(home, [error(503, "provider down", times=2)])
    identities: set[str] = set()

    async def fail(count: int) -> None:
        for _ in range(count):
            view, events, _ = await run_once(client, config, failing)
            assert (view.status, view.final_message) == ("error", UNAVAILABLE_TEXT)
            [started] = model_attempts(events)
            assert started.activity_task_started_event_attributes.attempt == 2, "exhausted, not just failed once"
            identities.add(started.activity_task_started_event_attributes.identity)
            assert LLM_BREAKER_REPORT in breaker_markers(events)

    async with contextlib.AsyncExitStack() as worker_b:
        async with running_worker(client, config, identity="worker-a"):
            await fail(3)
            assert (await breaker_state(client, failing)).failures == 3
            # A second worker joins the task queue, then the first one leaves: the count lives in Temporal.
            # (Its own connection, as a separate process would have: the SDK refuses two workers of one queue
            # on one client.)
            other_client = await Client.connect(temporal_address, data_converter=pydantic_data_converter)
            await worker_b.enter_async_context(running_worker(other_client, config, identity="worker-b"))
        await fail(2)
        state = await breaker_state(client, failing)
        view, events, handle = await run_once(client, config, failing)

    assert identities == {"worker-a", "worker-b"}
    assert (state.phase, state.failures) == ("open", 5)
    assert (view.status, view.final_message) == ("error", CIRCUIT_OPEN_TEXT)
    assert "model.invoke" not in [name for name, _ in scheduled_activities(events)], "open: the model is not called"
    assert ai_messages(home, handle)[-1]["additional_kwargs"]["error_type"] == "CircuitBreakerOpen"


async def test_a_breaker_opened_by_another_worker_turns_this_workers_calls_away_once_its_kept_answer_is_stale(
    client: Client, home: Path, temporal_address: str
) -> None:
    """A worker keeps a closed answer for ``CLOSED_FRESH_SECONDS`` (``activities/llm_breaker.py``); reports that
    other workers send reach its checks once the answer is stale, not never."""
    config = llm_config(home, temporal_address, threshold=1, recovery=3600)
    model = write_script(home, [answer("hi")])
    async with running_worker(client, config):
        view, _, _ = await run_once(client, config, model)
        assert view.final_message == "hi"  # this worker now keeps "closed"
        # Another worker's exhausted call opens the breaker: its report, as that worker sends it.
        await report_to_breaker(client, config, model, BreakerReport("failure", "elsewhere", 1, 3600))
        while (await breaker_state(client, model)).phase != "open":
            pass
        while True:
            view, events, _ = await run_once(client, config, model)
            if view.final_message != "hi":
                break

    assert view.final_message == CIRCUIT_OPEN_TEXT
    assert "model.invoke" not in [name for name, _ in scheduled_activities(events)]


async def test_a_breaker_opened_while_a_run_paused_turns_its_gated_call_away_without_calling_the_provider(
    client: Client, home: Path, temporal_address: str
) -> None:
    """The run found the breaker closed, so its next call is gated in the model activity's worker
    (``middlewares/_breaker_gate.py``). A new worker (nothing kept) sees the breaker open: it turns the call away,
    the run checks and answers with the circuit-open fallback, and the script's next answer is never used."""
    config = llm_config(home, temporal_address, threshold=1, recovery=3600)
    model = write_script(home, [ask_clarification(options=["red", "blue"]), answer("never sent")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "paint it", model=model)
        assert (await settle(handle)).status == "awaiting_input"
    await report_to_breaker(client, config, model, BreakerReport("failure", "elsewhere", 1, 3600))
    async with running_worker(client, config):
        while (await breaker_state(client, model)).phase != "open":
            pass
        await handle.signal("clarification_reply", "blue")
        view = await handle.result()
        events = await history_events(handle)
        await replay(client, handle)

    assert (view.status, view.final_message) == ("error", CIRCUIT_OPEN_TEXT)
    model_calls = [e for e in events if is_model_scheduled(e)]
    assert len(model_calls) == 2, "the question, then the gated call: none after the check said open"
    gated = json.loads(model_calls[1].activity_task_scheduled_event_attributes.input.payloads[0].data)
    assert gated["breaker_gate"] is True
    [failed] = [e for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED]
    failure = failed.activity_task_failed_event_attributes.failure
    assert failure.application_failure_info.type == NOT_CLOSED_ERROR
    assert breaker_markers(events) == [LLM_BREAKER_CHECK, LLM_BREAKER_CHECK], "first call, then after the refusal"
    assert [m["content"] for m in ai_messages(home, handle)][-1] == CIRCUIT_OPEN_TEXT


async def test_half_open_admits_one_probe_and_its_success_closes_the_breaker(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = llm_config(home, temporal_address, attempts=1, threshold=1, recovery=0.5)
    model = write_script(home, [error(500, "boom")])
    breaker = client.get_workflow_handle(breaker_workflow_id(model))
    async with running_worker(client, config):
        view, _, _ = await run_once(client, config, model)
        assert view.final_message == UNAVAILABLE_TEXT
        assert (await breaker_state(client, model)).failures == 1
        await wait_for_history_event(breaker, lambda e: e.event_type == EventType.EVENT_TYPE_TIMER_FIRED)

        # Someone else holds the half-open probe: a run arriving now is turned away without calling the model.
        admission = await breaker.execute_update(ACQUIRE_UPDATE, ProbeRequest("elsewhere", 30), result_type=Admission)
        assert (admission.admitted, admission.probe) == (True, True)
        rewrite(model, [answer("probe ok")])
        view, events, _ = await run_once(client, config, model)
        assert view.final_message == CIRCUIT_OPEN_TEXT
        assert "model.invoke" not in [name for name, _ in scheduled_activities(events)]

        # The probe comes back without a verdict (e.g. a non-retriable error): the next run becomes the probe.
        await breaker.signal(REPORT_SIGNAL, BreakerReport("release", "elsewhere", 1, 0.5))
        view, events, _ = await run_once(client, config, model)
        state = await breaker_state(client, model)

    assert (view.status, view.final_message) == ("completed", "probe ok")
    assert breaker_markers(events) == [LLM_BREAKER_CHECK, LLM_BREAKER_REPORT], "the probe reports its success"
    assert (state.phase, state.failures, state.probe_holder) == ("closed", 0, None)


async def test_on_open_wait_waits_durably_then_probes(client: Client, home: Path, temporal_address: str) -> None:
    config = llm_config(home, temporal_address, attempts=1, threshold=1, recovery=0.5, on_open="wait")
    model = write_script(home, [error(500, "boom")])
    breaker = client.get_workflow_handle(breaker_workflow_id(model))
    async with running_worker(client, config):
        view, _, _ = await run_once(client, config, model)
        assert view.final_message == UNAVAILABLE_TEXT
        await wait_for_history_event(breaker, lambda e: e.event_type == EventType.EVENT_TYPE_TIMER_FIRED)
        # Someone else holds the half-open probe for as long as the test wants: the next run has to wait.
        admission = await breaker.execute_update(ACQUIRE_UPDATE, ProbeRequest("elsewhere", 60), result_type=Admission)
        assert admission.probe
        rewrite(model, [answer("waited")])
        handle = await start_run(client, config, "hello", model=model)
        await wait_for_history_event(handle, lambda e: e.event_type == EventType.EVENT_TYPE_TIMER_STARTED)
    # The worker that started the wait is gone; another one finishes the run once the probe is free.
    async with running_worker(client, config):
        await breaker.signal(REPORT_SIGNAL, BreakerReport("release", "elsewhere", 1, 0.5))
        view = await settle(handle)
        events = await history_events(handle)
        waits = [
            e
            for e in await handle.query("events", 0, result_type=list[dict[str, Any]])
            if e["kind"] == "llm_circuit_wait"
        ]
        state = await breaker_state(client, model)

    assert (view.status, view.final_message) == ("completed", "waited")
    timer = next(e for e in events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED)
    assert json.loads(timer.user_metadata.summary.data) == "LLMErrorHandling.wrap_model_call · circuit open, waiting"
    assert waits and {w["phase"] for w in waits} == {"half_open"}
    # Turned away by a probe in flight, a caller asks again after min(5 s, cooldown), at least 100 ms later.
    assert all(100 <= w["wait_ms"] <= 500 for w in waits)
    kinds = [e.event_type for e in events]
    model_scheduled = next(i for i, e in enumerate(events) if is_model_scheduled(e))
    assert kinds.index(EventType.EVENT_TYPE_TIMER_FIRED) < model_scheduled, "the model is called after the wait"
    assert breaker_markers(events)[-2:] == [LLM_BREAKER_CHECK, LLM_BREAKER_REPORT], "the waiting run became the probe"
    assert (state.phase, state.failures) == ("closed", 0)


async def test_cancellation_during_a_model_call_is_not_swallowed(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = llm_config(home, temporal_address)
    model = write_script(home, [{"content": "too late", "delay": 30}])
    async with running_worker(client, config):
        handle = await start_run(client, config, "hello", model=model)
        await wait_for_history_event(handle, is_model_scheduled)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        description = await handle.describe()
        view = await handle.query("status", result_type=RunView)

    assert description.status == WorkflowExecutionStatus.CANCELED
    assert view.status == "cancelled"
    assert not [m for m in ai_messages(home, handle) if m["additional_kwargs"].get("deerflow_error_fallback")]


async def test_the_breaker_continues_as_new_without_losing_reports(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = llm_config(home, temporal_address)
    model = write_script(home, [answer("unused")])
    report = BreakerReport("failure", "test", failure_threshold=10_000, recovery_timeout_sec=60)
    async with running_worker(client, config):
        breaker = await report_to_breaker(client, config, model, report)
        first = client.get_workflow_handle(breaker.id, run_id=breaker.result_run_id)
        sent = 1
        # Each report adds history; the session's server suggests continue-as-new after 150 events.
        while (await first.describe()).status == WorkflowExecutionStatus.RUNNING:
            for _ in range(10):
                await breaker.signal(REPORT_SIGNAL, report)  # to the latest run, even after continue-as-new
                sent += 1
            assert sent < 1_000, "the breaker never continued as new"
        state = await breaker_state(client, model)

    assert (await first.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW
    assert (state.phase, state.failures) == ("closed", sent)
