"""The best-effort activity call (``middlewares.context.best_effort``): a failed call comes back as a value the hook
falls back from, a cancelled one is re-raised. On the real dev server: a run cancelled while its memory load or
its circuit-breaker report is in flight ends ``cancelled``, with after_agent run and the state committed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.plugin import SimplePlugin

from middlewares.context import best_effort
from tests.support import activity_error, start_run
from vocabulary.contracts import LLM_BREAKER_REPORT, MEMORY_LOAD, RUN_CLOSE
from workers.testing import answer, make_config, running_worker, write_script
from workers.testing.history import history_events, scheduled_activities
from workflows.run import RunView

RECORDER = "tests.support.recording_middlewares:RecorderA"


async def _returns(value: Any) -> Any:
    return value


async def _raises(error: BaseException) -> Any:
    raise error


async def test_a_result_comes_back_as_it_is() -> None:
    assert await best_effort(_returns("memory")) == "memory"


async def test_a_failed_call_comes_back_as_its_activity_error() -> None:
    failed = activity_error(ApplicationError("store down"), MEMORY_LOAD)
    assert await best_effort(_raises(failed)) is failed


async def test_a_cancelled_call_is_re_raised() -> None:
    cancelled = activity_error(CancelledError("run cancelled"), MEMORY_LOAD)
    with pytest.raises(type(cancelled)) as raised:
        await best_effort(_raises(cancelled))
    assert raised.value is cancelled


async def test_other_exceptions_are_not_best_effort_failures() -> None:
    with pytest.raises(asyncio.CancelledError):
        await best_effort(_raises(asyncio.CancelledError()))
    with pytest.raises(ValueError):
        await best_effort(_raises(ValueError("a bug")))


# -- cancelling a run while a best-effort call is in flight -------------------------------------------------


class ActivityHold:
    """The worker's ``name`` activity replaced by one that never answers: a store or RPC that stalls, as the run
    sees it. ``entered`` is set once a call is in flight; only the run's cancellation ends it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.entered = asyncio.Event()

    def plugin(self) -> SimplePlugin:
        return SimplePlugin(f"hold-{self.name}", activities=self._replace)

    def _replace(self, existing: Sequence[Callable[..., Any]] | None) -> list[Callable[..., Any]]:
        kept = [fn for fn in existing or [] if activity._Definition.must_from_callable(fn).name != self.name]
        assert len(kept) == len(existing or []) - 1, f"the worker has no {self.name} activity to hold"
        return [*kept, self._held()]

    def _held(self) -> Callable[..., Any]:
        entered = self.entered

        @activity.defn(name=self.name)
        async def held(_: Any) -> None:
            entered.set()
            await asyncio.Event().wait()

        return held


async def _cancel_when_held(handle: WorkflowHandle[Any, RunView], hold: ActivityHold) -> tuple[RunView, list[Any]]:
    await asyncio.wait_for(hold.entered.wait(), timeout=120)
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    view: RunView = await handle.query("status", result_type=RunView)
    events: list[Any] = await handle.query("events", 0, result_type=list[dict[str, Any]])
    return view, events


def _ran_after_agent(events: list[dict[str, Any]]) -> bool:
    return ("A", "after_agent") in [(e.get("middleware"), e.get("hook")) for e in events]


async def test_a_run_cancelled_during_its_memory_load_ends_cancelled_after_its_after_agent(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(
        home,
        temporal_address,
        run={
            "extensions": [RECORDER],
            # Long enough that only the cancellation, never the timeout, ends the held load.
            "middlewares": {"dynamic_context": {"memory_timeout_seconds": 600}},
        },
    )
    hold = ActivityHold(MEMORY_LOAD)
    async with running_worker(client, config, plugins=[hold.plugin()]):
        handle = await start_run(client, config, "hello", model=write_script(home, [answer("never")]))
        view, events = await _cancel_when_held(handle, hold)
        description = await handle.describe()
        activities = [name for name, _ in scheduled_activities(await history_events(handle))]

    assert description.status == WorkflowExecutionStatus.CANCELED
    assert view.status == "cancelled" and view.turns == 0, "the run did not go on to call the model"
    assert _ran_after_agent(events)
    assert activities.count(RUN_CLOSE.name) == 1, "after_agent's compensation commits the state"


async def test_a_run_cancelled_during_its_breaker_report_ends_cancelled_after_its_after_agent(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(
        home,
        temporal_address,
        run={
            "extensions": [RECORDER],
            "middlewares": {"llm_error_handling": {"llm_call": {"retry_max_attempts": 1}}},
        },
    )
    # One retriable failure, exhausted at once: LLMErrorHandling reports it to the breaker, which is held.
    model = write_script(home, [{"error": {"status": 503, "message": "provider down"}}])
    hold = ActivityHold(LLM_BREAKER_REPORT)
    async with running_worker(client, config, plugins=[hold.plugin()]):
        handle = await start_run(client, config, "hello", model=model)
        view, events = await _cancel_when_held(handle, hold)
        description = await handle.describe()

    assert description.status == WorkflowExecutionStatus.CANCELED
    assert view.status == "cancelled" and view.final_message is None, "no fallback answer: the run was cancelled"
    assert _ran_after_agent(events)
