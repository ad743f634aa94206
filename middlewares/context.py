"""The run context: what a hook may use besides the state — deterministic time/ids/randomness and activities.

Hooks run inside the workflow, so they must never read the wall clock, call ``uuid4`` or touch files or the
network. Everything like that goes through this object. :class:`TemporalRunContext` backs it with
``workflow.now()``, ``workflow.uuid4()``, ``workflow.random()`` and ``workflow.execute_activity``; tests of
pure middleware logic may use another subclass with a fixed clock.
"""

from __future__ import annotations

import random as random_module
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, is_cancelled_exception

from vocabulary.contracts import ThreadRef

if TYPE_CHECKING:
    # Only a type here: middleware config models are imported by the settings, and middlewares import this.
    from middlewares.run_settings import RunSettings

T = TypeVar("T")


@dataclass
class ActivityOptions:
    """How to run one activity from a hook. Defaults suit short idempotent I/O."""

    start_to_close: timedelta = timedelta(seconds=30)
    heartbeat: timedelta | None = None
    retry: RetryPolicy | None = None
    local: bool = False
    """Local activities cost ~1 history event instead of ~6: use them for short idempotent I/O."""


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


@dataclass
class RunEvent:
    """A progress event a client can follow (turns, tool calls, retries, pauses)."""

    seq: int
    kind: str
    at: str
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The wire shape (``events`` query, progress stream, ``hartflow run --events``): one flat object."""
        return {"seq": self.seq, "kind": self.kind, "at": self.at, **self.data}


class RunContext(ABC):
    """Per-run context handed to every hook (DeerFlow's ``runtime.context``, made deterministic)."""

    def __init__(self, *, thread: ThreadRef, run_id: str, workflow_id: str, model: str, settings: RunSettings):
        self.thread = thread
        self.run_id = run_id
        self.workflow_id = workflow_id
        self.model = model
        self.settings = settings
        self.turn = 0
        self.stop_reason: str | None = None
        self.sandbox_id: str | None = None
        """The sandbox a tool of this run acquired (DeerFlow's ``runtime.context["sandbox_id"]``)."""
        self.sandbox_unreported = False
        """A sandbox tool activity (or a subagent) started while no sandbox id was known and no id came back: it
        may have created the thread's sandbox (a tool reports the id only when it returns, a subagent never), so
        the run releases by thread."""
        self.is_subagent = False
        """This run is a subagent working on a lead run's ``task`` call (``workflows/run/subagent.py``)."""
        self.call_counts: dict[str, int] = {}
        self.events: list[RunEvent] = []
        self.event_offset = 0
        """Stream items published before this run's first event (earlier runs of this chain, before
        continue-as-new) plus the state items it published since (``workflows/run/state_stream.py``): ``seq``
        counts on from here, so it is the event's offset in the run's workflow stream."""
        self.publish: Callable[[RunEvent], None] | None = None
        """Where each event goes besides ``events``: the run workflow's progress stream."""
        self.before_emit: Callable[[], None] | None = None
        """Called before each event is numbered: the run workflow publishes its state changes there (and counts
        them into ``event_offset``), so API clients see the state an event refers to before the event."""

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
        index = self.call_counts.get(purpose, 0)
        self.call_counts[purpose] = index + 1
        return index

    def emit(self, kind: str, **data: Any) -> None:
        if self.before_emit is not None:
            self.before_emit()
        event = RunEvent(self.event_offset + len(self.events), kind, self.now().isoformat(), data)
        self.events.append(event)
        if self.publish is not None:
            self.publish(event)


class TemporalRunContext(RunContext):
    def now(self) -> datetime:
        return workflow.now()

    def uuid(self) -> str:
        return str(workflow.uuid4())

    def random(self) -> random_module.Random:
        return workflow.random()

    def patched(self, patch_id: str) -> bool:
        return workflow.patched(patch_id)

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
            result = await workflow.execute_local_activity(
                activity,
                arg,
                result_type=result_type,
                start_to_close_timeout=opts.start_to_close,
                retry_policy=opts.retry,
                summary=summary,
            )
            return result
        result = await workflow.execute_activity(
            activity,
            arg,
            result_type=result_type,
            start_to_close_timeout=opts.start_to_close,
            heartbeat_timeout=opts.heartbeat,
            retry_policy=opts.retry,
            summary=summary,
        )
        return result
