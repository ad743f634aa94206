"""Heartbeats while an activity awaits its work, so the server notices a worker that died mid-call."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from temporalio import activity

T = TypeVar("T")


async def heartbeating(work: Awaitable[T], interval: float) -> T:
    """Await ``work``, heartbeating every ``interval`` seconds (at least twice per heartbeat timeout). Outside an
    activity (a direct call in a test or a tool listing) it only awaits."""
    if not activity.in_activity():
        return await work
    if timeout := activity.info().heartbeat_timeout:
        interval = min(interval, timeout.total_seconds() / 2)

    async def beat() -> None:
        while True:
            await asyncio.sleep(interval)
            activity.heartbeat()

    beater = asyncio.create_task(beat())
    try:
        return await work
    finally:
        beater.cancel()
