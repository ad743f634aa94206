"""What fault tests need beyond ``workers.testing``: whether a killed process is gone, which worker did an
activity's work, and the waits on the conditions a test kills at — pending activities, exits — polled with a
timeout, never a fixed sleep."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import WorkflowHandle

from workers.testing.history import scheduled_activities
from workers.testing.processes import POLL_SECONDS


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
