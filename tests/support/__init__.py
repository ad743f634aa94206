"""Helpers only the test modules share: starting a run, a worker with an API server (or two server processes), the
``hartflow`` CLI (or any command) in a process of its own, a storage backend's settings, a stub run context for hook
unit tests, and reading a thread's committed state. What an extension's tests need too (servers, configs, scripts,
workers, histories) is in ``workers.testing``; the two users of the per-user tests are in
``tests/support/tenants.py``."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ActivityError, RetryState

from activities.storage.filesystem import FilesystemObjectStore
from activities.thread_store import FilesystemThreadStore
from middlewares.context import ActivityOptions, RunContext, RunProgress
from middlewares.run_settings import RunSettings
from vocabulary.contracts import ThreadRef
from workers.client.runs import Runs, RunStart
from workers.config import HartflowConfig
from workers.payloads import client_for
from workers.testing import running_worker, serving_api, unique
from workers.testing.api_server import ApiServer, write_config
from workers.testing.processes import REPO
from workers.worker import connect
from workflows.run import RunView


async def start_run(
    client: Client,
    config: HartflowConfig,
    message: str,
    *,
    model: str,
    thread_id: str | None = None,
    files: list[str] | None = None,
) -> WorkflowHandle[Any, RunView]:
    """Start a run as every hartflow client does (``workers/client/runs.py``), on ``thread_id`` or a new thread."""
    thread = ThreadRef(config.user_id, thread_id or unique("thread"))
    run = RunStart(thread, message, model, config.run, files=tuple(files or ()))
    # The handle reads results through the config's converter, so large results (claim-checked) decode.
    return await Runs(client_for(client, config), config.temporal.task_queue).start(run)


async def run_process(
    *argv: str, timeout: float, env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[int, str, str]:
    """``argv`` in a process of its own (no stdin), awaited without blocking this loop (a worker may run on it):
    its exit code, stdout and stderr."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=timeout)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def hartflow_cli(config_file: Path, *args: str, timeout: float = 180) -> tuple[int, str, str]:
    """``hartflow ARGS --config FILE`` in a process of its own, as a user runs it (none of this process's
    ``HARTFLOW_`` or ``TEMPORAL_`` variables): its exit code, stdout and stderr (:func:`run_process`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARTFLOW_", "TEMPORAL_"))}
    argv = (sys.executable, "-m", "workers.cli", *args, "--config", str(config_file))
    return await run_process(*argv, timeout=timeout, env={**env, "PYTHONPATH": str(REPO)})


@contextlib.asynccontextmanager
async def worker_and_api(config: HartflowConfig, client: Client) -> AsyncIterator[str]:
    """A worker and an API server for ``config``, the server with the client ``hartflow serve`` makes (its own
    connection, with the config's payload converter: closed runs are never queried); yields the server's URL."""
    connected = await connect(config)
    async with running_worker(client, config), serving_api(config, connected) as url:
        yield url


@contextlib.contextmanager
def two_api_servers(config: HartflowConfig, directory: Path) -> Iterator[tuple[ApiServer, ApiServer]]:
    """Two ``hartflow serve`` processes of ``config`` (its file written to ``directory``), not started yet; both are
    stopped on leaving, and what they wrote to stderr is printed (pytest shows it when the test fails)."""
    config_file = write_config(config, directory)
    first, second = ApiServer(config_file), ApiServer(config_file)
    try:
        yield first, second
    finally:
        first.stop()
        second.stop()
        print("".join(first.stderr + second.stderr))


def model_specs(scripts_dir: Path, **settings: Any) -> dict[str, Any]:
    """``api`` settings with which a run may name its own scripted model from ``scripts_dir`` (``context.model_name``
    of a script's path: ``api.allow_model_specs``, ``api.model_scripts_dir``); ``settings`` are further ones."""
    return {"allow_model_specs": True, "model_scripts_dir": str(scripts_dir), **settings}


def storage_settings(request: pytest.FixtureRequest, backend: str) -> dict[str, Any]:
    """The ``storage`` settings of ``backend`` for ``make_config``: ``s3`` is this test's own bucket (the
    ``s3_storage`` fixture: the S3 server starts only for a test that asks for it), else the filesystem."""
    if backend == "s3":
        settings: dict[str, Any] = request.getfixturevalue("s3_storage")
        return settings
    return {"backend": "filesystem"}


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
