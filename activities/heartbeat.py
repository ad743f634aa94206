"""Heartbeats while an activity awaits its work, so the server notices a worker that died mid-call."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Iterator
from typing import TypeVar

from temporalio import activity

T = TypeVar("T")


@contextlib.contextmanager
def heartbeats(interval: float) -> Iterator[None]:
    """Heartbeat every ``interval`` seconds (at least twice per heartbeat timeout) while the block runs, from a
    timer of the event loop that re-arms itself. Outside an activity (a direct call in a test or a tool listing)
    it does nothing.

    A timer, not a task sleeping in a loop: a task costs the event loop a step to start, one per beat and one to
    be cancelled, while a turn's quick activities never live long enough to beat (``python -m bench.loop_steps``
    counts a turn's steps). The timer runs in the activity's context (``call_later`` copies it), which
    ``activity.heartbeat`` reads."""
    if not activity.in_activity():
        yield
        return
    if timeout := activity.info().heartbeat_timeout:
        interval = min(interval, timeout.total_seconds() / 2)
    loop = asyncio.get_running_loop()
    timer: asyncio.TimerHandle

    def beat() -> None:
        nonlocal timer
        activity.heartbeat()
        timer = loop.call_later(interval, beat)

    timer = loop.call_later(interval, beat)
    try:
        yield
    finally:
        timer.cancel()


async def heartbeating(work: Awaitable[T], interval: float) -> T:
    """Await ``work`` within :func:`heartbeats`."""
    with heartbeats(interval):
        return await work
