"""Tools of a team's own, as a hartflow user writes them (``activities/configured_tools/kinds.py``): a decorated
function that records each attempt (the first one hangs until its worker is killed) and activities a team's
worker serves on its own task queue (one of them held until the test lets it answer)."""

from __future__ import annotations

import asyncio
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from temporalio import activity

from activities.configured_tools import durable_tool

LOG_VARIABLE = "OWN_TOOLS_LOG"
"""Where :func:`slow_note` appends (the worker's environment: a test sets it before the worker starts)."""


@durable_tool(timeout_seconds=120, max_attempts=5, heartbeat_seconds=2)
async def slow_note(text: str, repeat: int = 1) -> dict[str, object]:
    """Write a note down, slowly.

    The first attempt hangs (its worker is meant to be killed); later attempts finish at once.
    """
    log = Path(os.environ[LOG_VARIABLE])
    first = not log.exists()
    with log.open("a", encoding="utf-8") as file:
        file.write("start\n")
    if first:
        await asyncio.sleep(3600)
    with log.open("a", encoding="utf-8") as file:
        file.write("end\n")
    return {"noted": text * repeat}


@dataclass
class CustomerQuery:
    customer_id: str
    fields: list[str]


@activity.defn(name="crm_lookup")
async def crm_lookup(query: CustomerQuery) -> dict[str, object]:
    return {"customer": query.customer_id, "fields": {name: f"{name} of {query.customer_id}" for name in query.fields}}


class HeldLookups:
    """:func:`held_crm_lookup`'s gate: ``calls`` counts its attempts, ``arrived`` is set by each, and each waits
    for ``released``."""

    def __init__(self) -> None:
        self.calls = 0
        self.arrived = threading.Event()
        self.released = threading.Event()


HELD = HeldLookups()


@activity.defn(name="held_crm_lookup")
async def held_crm_lookup(query: CustomerQuery) -> dict[str, object]:
    HELD.calls += 1
    HELD.arrived.set()
    await asyncio.to_thread(HELD.released.wait, 300)
    return await crm_lookup(query)
