"""The run context: what a hook may use besides the state — deterministic time/ids/randomness and activities.

Hooks run inside the workflow, so they must never read the wall clock, call ``uuid4`` or touch files or the
network. Everything like that goes through this object. :class:`TemporalRunContext` backs it with
``workflow.now()``, ``workflow.uuid4()``, ``workflow.random()`` and ``workflow.execute_activity``; tests of
pure middleware logic may use another subclass with a fixed clock.

The engine (``workflows/run/workflow.py``) builds the context once per run, with everything it needs: nothing on
it is wired from outside afterwards, and it knows no middleware's settings (only the call policies built from
them), so this module, which every middleware imports, imports none of them.
"""

from __future__ import annotations

import random as random_module
from abc import ABC, abstractmethod
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, RetryState, is_cancelled_exception
from temporalio.exceptions import TimeoutError as ActivityTimeout

from middlewares import patches
from middlewares._run_events import RunEvent as RunEvent  # the run's events: hooks and the engine name them here
from middlewares._run_events import RunEvents as RunEvents
from middlewares.call_settings import ModelCapabilities
from vocabulary.contracts import LlmRetryBudget, ThreadRef

T = TypeVar("T")


@dataclass
class ActivityOptions:
    """How to run one activity from a hook. Defaults suit short idempotent I/O."""

    start_to_close: timedelta = timedelta(seconds=30)
    heartbeat: timedelta | None = None
    retry: RetryPolicy | None = None
    local: bool = False
    """Local activities cost ~1 history event instead of ~6: use them for short idempotent I/O."""
    task_queue: str | None = None
    """Another task queue than the run's (a team's activity offered as a tool: ``activity_as_tool``)."""


async def best_effort(call: Awaitable[T]) -> T | ActivityError:
    """Await an activity call whose failure the hook survives (it falls back, logs, goes on): a failed call's
    ``ActivityError`` comes back as the value. A cancellation is re-raised, never returned: the activity was
    cancelled because its run was, and the run must end cancelled (with after_agent), not carry on."""
    try:
        return await call
    except ActivityError as error:
        if is_cancelled_exception(error):
            raise
        return error


@dataclass(frozen=True)
class ModelCallPolicy:
    """How the run calls its model, the agent's turns and the hooks' single prompts alike: the activity options
    (timeouts, Temporal's retry policy) and the per-reason retry budget the model activity enforces. The engine
    builds it once from the run's settings (``RunSettings.model_call_policy``)."""

    options: ActivityOptions
    retry_budget: LlmRetryBudget
    timeout_seconds: float
    """One attempt's start-to-close timeout, as configured (``options`` holds it as a ``timedelta``)."""
    stream_tokens: bool = True
    """Publish the lead agent's answers while they are generated (``vocabulary/live_tokens.py``)."""


@dataclass(frozen=True)
class ToolCallPolicy:
    """How the run calls a tool activity (built-in or MCP): built once from ``RunSettings.tool_call``."""

    options: ActivityOptions


@dataclass
class RunProgress:
    """What the run counts and how it stopped: the engine advances ``turn``; hooks read it through the context,
    count their model calls with :meth:`RunContext.next_call_index` and stop the run with
    :meth:`RunContext.stop`. Carried across continue-as-new."""

    turn: int = 0
    stop_reason: str | None = None
    call_counts: dict[str, int] = field(default_factory=dict)


class RunContext(ABC):
    """Per-run context handed to every hook (DeerFlow's ``runtime.context``, made deterministic): the run's
    identity, its call policies and the model's capabilities, fixed at construction; services (clock, ids,
    randomness, activities, events); and the progress hooks may read (turn, stop reason) but change only through
    :meth:`next_call_index` and :meth:`stop`."""

    def __init__(
        self,
        *,
        thread: ThreadRef,
        run_id: str,
        workflow_id: str,
        model: str,
        model_calls: ModelCallPolicy,
        tool_calls: ToolCallPolicy,
        capabilities: ModelCapabilities,
        is_subagent: bool = False,
        progress: RunProgress | None = None,
        events: RunEvents | None = None,
    ) -> None:
        self.thread: Final = thread
        self.run_id: Final = run_id
        self.workflow_id: Final = workflow_id
        self.model: Final = model
        self.model_calls: Final = model_calls
        self.tool_calls: Final = tool_calls
        self.capabilities: Final = capabilities
        self.is_subagent: Final = is_subagent
        """This run is a subagent working on a lead run's ``task`` call (``workflows/run/subagent.py``)."""
        self._progress = progress or RunProgress()
        self._events = events or RunEvents()
        self.breaker_closed_at: dict[str, datetime] = {}
        """Per model, in runs recorded with LLMErrorHandling's old known-closed rule: when the worker of the run's
        last agent model call saw its circuit breaker closed with no failures (``vocabulary/breaker.py``), as the
        engine took it from that call's answer."""
        self.breaker_known_closed: set[str] = set()
        """Models whose circuit breaker this run last found closed with no failures (its check said so, or a
        call gated on it went through): LLMErrorHandling leaves their next check to the model call."""

    @property
    def turn(self) -> int:
        return self._progress.turn

    @property
    def stop_reason(self) -> str | None:
        """Why the run stopped (or is stopping) before the model answered for good; ``None`` while it runs on."""
        return self._progress.stop_reason

    @property
    def events(self) -> list[RunEvent]:
        return self._events.items

    @property
    def user_id(self) -> str:
        return self.thread.user_id

    @property
    def thread_id(self) -> str:
        return self.thread.thread_id

    @abstractmethod
    def now(self) -> datetime:
        """The run's clock (timezone-aware UTC)."""

    @abstractmethod
    def uuid(self) -> str: ...

    @abstractmethod
    def random(self) -> random_module.Random: ...

    @abstractmethod
    async def call(
        self,
        activity: str,
        arg: Any,
        *,
        result_type: type[T],
        summary: str,
        options: ActivityOptions | None = None,
    ) -> T:
        """Run an activity by name and return its result. ``summary`` is what the Web UI shows."""

    def patched(self, patch_id: str) -> bool:
        """Whether this run takes the new branch of a changed command sequence (``workflow.patched``): true for
        new runs and for runs whose history took it, false when replaying a history from before the change."""
        return True

    def next_call_index(self, purpose: str) -> int:
        """0-based index of the next model call for ``purpose`` in this run (scripted models key on it)."""
        counts = self._progress.call_counts
        index = counts.get(purpose, 0)
        counts[purpose] = index + 1
        return index

    def give_back_call_index(self, purpose: str, index: int) -> None:
        """The call given ``index`` (the last one for ``purpose``) never reached the provider: the next one takes
        its index."""
        self._progress.call_counts[purpose] = index

    def emit(self, kind: str, **data: Any) -> None:
        """Record a progress event (``events`` query, progress stream, ``hartflow run --events``)."""
        self._events.add(kind, lambda: self.now().isoformat(), data)

    def hold_event(self, kind: str, **data: Any) -> RunEvent:
        """Number a progress event now and publish it at :meth:`release_event` (``RunEvents.hold``)."""
        return self._events.hold(kind, lambda: self.now().isoformat(), data)

    def release_event(self) -> None:
        """Publish the held event and whatever was emitted behind it."""
        self._events.release()

    def stop(self, reason: str, event: str | None = None, **data: Any) -> None:
        """Stop the run for ``reason`` (its stop reason from now on, the only way to set one) and record the
        progress event ``event`` with ``data`` (by default ``stopped`` with the reason). The run ends after the
        current step; the engine reads a stop reason as "a hard stop cleared this turn's calls"."""
        self._progress.stop_reason = reason
        if event is None:
            self.emit("stopped", reason=reason)
        else:
            self.emit(event, **data)


def local_activity_error(activity: str, *, timed_out: bool) -> ActivityError:
    """The error a run sees when local activity ``activity`` timed out or failed for good (raised with the SDK's
    error as its cause): the ``ActivityError`` an activity's failure is, the same live and replayed.

    The SDK raises a local activity's timeout as ``ActivityError("Local Activity timed out")`` live and as the bare
    ``TimeoutError`` replayed from its marker, and its failure as the bare ``ApplicationError`` both ways (temporalio
    1.35; ``tests/test_local_activity_timeout.py``). A hook that falls back on an ``ActivityError``
    (:func:`best_effort`) would go on live and fail the run on replay (a nondeterminism error for the worker that
    next replays it), or let a best-effort failure end the run. A timeout is raised as the live one is, the SDK's
    retry state included."""
    return ActivityError(
        "Local Activity timed out" if timed_out else "Local Activity failed",
        scheduled_event_id=0,
        started_event_id=0,
        identity="",
        activity_type=activity,
        activity_id="",
        retry_state=RetryState.CANCEL_REQUESTED if timed_out else None,
    )


class TemporalRunContext(RunContext):
    _in_baseline: frozenset[str] = frozenset()

    def take_patch_baseline(self) -> None:
        """Ask the baseline patch (``middlewares/patches.py``): the run's first command, so that every patch it
        stands for is then taken without a marker of its own. A run recorded with an earlier baseline takes that
        one's patches (asking a later one first records nothing in its replay)."""
        for baseline, taken in patches.BASELINES:
            if workflow.patched(baseline):
                self._in_baseline = taken
                return

    def now(self) -> datetime:
        return workflow.now()

    def uuid(self) -> str:
        return str(workflow.uuid4())

    def random(self) -> random_module.Random:
        return workflow.random()

    def patched(self, patch_id: str) -> bool:
        return patch_id in self._in_baseline or workflow.patched(patch_id)

    async def call(
        self,
        activity: str,
        arg: Any,
        *,
        result_type: type[T],
        summary: str,
        options: ActivityOptions | None = None,
    ) -> T:
        opts = options or ActivityOptions()
        result: T
        if opts.local:
            try:
                result = await workflow.execute_local_activity(
                    activity,
                    arg,
                    result_type=result_type,
                    start_to_close_timeout=opts.start_to_close,
                    retry_policy=opts.retry,
                    summary=summary,
                )
            except ActivityTimeout as timeout:
                raise local_activity_error(activity, timed_out=True) from timeout
            except ApplicationError as failure:
                # A local activity's failure arrives bare, where an activity's comes as an ActivityError caused by
                # it (tests/test_local_activity_timeout.py): a best-effort hook let it end the run.
                if not self.patched(patches.LOCAL_FAILURE_AS_ACTIVITY_ERROR):
                    raise
                raise local_activity_error(activity, timed_out=False) from failure
            return result
        result = await workflow.execute_activity(
            activity,
            arg,
            result_type=result_type,
            start_to_close_timeout=opts.start_to_close,
            heartbeat_timeout=opts.heartbeat,
            retry_policy=opts.retry,
            summary=summary,
            task_queue=opts.task_queue,
        )
        return result
