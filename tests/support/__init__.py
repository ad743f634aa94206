"""Helpers shared by the test modules: configs pointed at the session's dev server, scripts, runs, workers."""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ActivityError, RetryState

from activities.storage.filesystem import FilesystemObjectStore
from activities.thread_store import FilesystemThreadStore
from middlewares.context import ActivityOptions, RunContext, RunProgress
from middlewares.run_settings import RunSettings
from tests.support.history import fill_transcript_messages
from vocabulary.contracts import ModelCallInput, ThreadRef
from vocabulary.workflow_ids import run_workflow_id
from workers.config import HartflowConfig, load_config
from workers.payloads import client_for
from workers.worker import build_worker
from workers.worker_stop import running
from workflows import search_attributes as sa
from workflows.run import RunInput, RunView, RunWorkflow


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def make_config(home: Path, address: str, **overrides: Any) -> HartflowConfig:
    run = overrides.pop("run", {})
    sandbox = overrides.pop("sandbox", {})
    storage = overrides.pop("storage", {})
    return load_config(
        overrides={
            "storage": {"home": str(home), **storage},
            "temporal": {"address": address, "task_queue": unique("tq")},
            "sandbox": {"allow_host_bash": True, **sandbox},
            "run": {"model_call": {"heartbeat_seconds": 5}, "tool_call": {"heartbeat_seconds": 5}, **run},
            **overrides,
        },
        environ={},
    )


def write_script(directory: Path, responses: list[dict[str, Any]], name: str | None = None) -> str:
    path = directory / (name or f"{unique('script')}.json")
    path.write_text(json.dumps({"responses": responses}), encoding="utf-8")
    return f"scripted:{path}"


def tool_call(name: str, call_id: str | None = None, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id or unique("call")}


def answer(text: str) -> dict[str, Any]:
    return {"content": text, "response_metadata": {"finish_reason": "stop"}}


def calls(*tool_calls: dict[str, Any], content: str = "") -> dict[str, Any]:
    return {
        "content": content,
        "tool_calls": list(tool_calls),
        "response_metadata": {"finish_reason": "tool_calls"},
    }


def ask_clarification(
    question: str = "Which colour?",
    *,
    call_id: str | None = "ask1",
    options: list[str] | None = None,
    clarification_type: str = "approach_choice",
) -> dict[str, Any]:
    """A scripted model turn that asks the user (``ask_clarification``); ``options`` only when given."""
    args: dict[str, Any] = {"question": question, "clarification_type": clarification_type}
    if options:
        args["options"] = options
    return calls(tool_call("ask_clarification", call_id, **args))


@contextlib.asynccontextmanager
async def running_worker(client: Client, config: HartflowConfig, **options: Any) -> AsyncIterator[None]:
    """A worker for ``config`` on ``client``'s connection, with ``config``'s converter (its claim check). It stops
    as every in-process worker does: no run it cached outlives it (``workers/worker_stop.py``)."""
    async with running(build_worker(client_for(client, config), config, **options)):
        yield


async def start_run(
    client: Client,
    config: HartflowConfig,
    message: str,
    *,
    model: str,
    thread_id: str | None = None,
    files: list[str] | None = None,
) -> WorkflowHandle[Any, RunView]:
    thread = thread_id or unique("thread")
    # The handle reads results through the config's converter, so large results (claim-checked) decode.
    return await client_for(client, config).start_workflow(
        RunWorkflow.run,
        RunInput(
            thread_id=thread,
            message=message,
            model=model,
            user_id=config.user_id,
            settings=config.run,
            files=list(files or []),
        ),
        id=run_workflow_id(config.user_id, thread),
        task_queue=config.temporal.task_queue,
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(sa.THREAD_ID, thread),
                SearchAttributePair(sa.USER_ID, config.user_id),
                SearchAttributePair(sa.STATUS, "running"),
            ]
        ),
    )


async def settle(handle: WorkflowHandle[Any, Any]) -> RunView:
    """Wait (event-driven, through the run's update) until the run pauses or ends."""
    view: RunView = await handle.execute_update("wait_settled", result_type=RunView)
    return view


async def history_events(handle: WorkflowHandle[Any, Any]) -> list[Any]:
    return [event async for event in handle.fetch_history_events()]


def scheduled_activities(events: list[Any]) -> list[tuple[str, str]]:
    """(activity type, summary) of every ActivityTaskScheduled event, in order."""
    result = []
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            summary = event.user_metadata.summary.data.decode() if event.HasField("user_metadata") else ""
            result.append(
                (
                    event.activity_task_scheduled_event_attributes.activity_type.name,
                    json.loads(summary or '""'),
                )
            )
    return result


async def scheduled_inputs(client: Client, events: list[Any], activity: str, input_type: type[Any]) -> list[Any]:
    """The decoded input of every ActivityTaskScheduled event of ``activity``, in order."""
    inputs = []
    for event in events:
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        attributes = event.activity_task_scheduled_event_attributes
        if attributes.activity_type.name == activity:
            [decoded] = await client.data_converter.decode(list(attributes.input.payloads), [input_type])
            inputs.append(decoded)
    if input_type is ModelCallInput:
        fill_transcript_messages(inputs)  # agent calls send their messages by reference
    return inputs


class StubRunContext(RunContext):
    """A RunContext for unit tests of hook logic outside a workflow: a fixed clock, counting ids, and
    activities answered by async functions registered by name; every activity call is recorded. Its call
    policies and capabilities come from ``settings`` as the engine builds them; ``progress`` is its turn, stop
    reason and call counts (a test may set the turn there, as the engine does)."""

    NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    def __init__(
        self,
        *,
        activities: dict[str, Callable[[Any], Awaitable[Any]]] | None = None,
        settings: RunSettings | None = None,
        thread_id: str = "thread-1",
        user_id: str = "default",
        is_subagent: bool = False,
    ) -> None:
        settings = settings or RunSettings()
        self.progress = RunProgress()
        super().__init__(
            thread=ThreadRef(user_id, thread_id),
            run_id="run-1",
            workflow_id=f"hartflow:{user_id}:{thread_id}",  # unchecked: stubbed hooks may be handed a bad id
            model="scripted:unused",
            model_calls=settings.model_call_policy(),
            tool_calls=settings.tool_call_policy(),
            capabilities=settings.model_capabilities,
            is_subagent=is_subagent,
            progress=self.progress,
        )
        self.activities = dict(activities or {})
        self.calls: list[tuple[str, Any, str]] = []
        self._ids = itertools.count()

    def now(self) -> datetime:
        return self.NOW

    def uuid(self) -> str:
        return f"id-{next(self._ids)}"

    def random(self) -> random.Random:
        return random.Random(0)

    async def call(
        self,
        activity: str,
        arg: Any,
        *,
        result_type: type[Any],
        summary: str,
        options: ActivityOptions | None = None,
    ) -> Any:
        self.calls.append((activity, arg, summary))
        return await self.activities[activity](arg)


async def wait_for_history_event(handle: WorkflowHandle[Any, Any], predicate: Callable[[Any], bool]) -> Any:
    """Wait (long-polling the history, no sleeps) for the first event of ``handle``'s run matching ``predicate``."""
    async for event in handle.fetch_history_events(wait_new_event=True):
        if predicate(event):
            return event
    raise AssertionError(f"{handle.id} closed without the awaited history event")


def activity_error(cause: BaseException, activity_type: str = "model.invoke") -> ActivityError:
    """What a workflow sees when an activity failed for good, for unit tests of hooks that catch it."""
    error = ActivityError(
        "Activity task failed",
        scheduled_event_id=5,
        started_event_id=6,
        identity="test",
        activity_type=activity_type,
        activity_id="1",
        retry_state=RetryState.MAXIMUM_ATTEMPTS_REACHED,
    )
    error.__cause__ = cause
    return error


def thread_state(home: Path, thread_id: str, user_id: str = "default") -> dict[str, Any]:
    """The newest committed thread state in the filesystem thread store rooted at ``home``, as JSON."""
    record = FilesystemThreadStore(home).record(ThreadRef(user_id, thread_id))
    assert record is not None, f"nothing committed for thread {thread_id}"
    state: dict[str, Any] = record["state"]
    return state


def sole_thread_state(home: Path, user_id: str = "default") -> dict[str, Any]:
    """The committed state of the one thread ``user_id`` has under ``home`` (for tests that never name it)."""
    [thread_id] = FilesystemObjectStore(home).list_children(f"users/{user_id}/threads/")
    return thread_state(home, thread_id, user_id)
