"""Following a run's progress from outside: its workflow stream, read by offset, shown to people or machines.

The run publishes every progress event (``RunContext.emit``) to its workflow stream, topic ``progress``
(``temporalio.contrib.workflow_streams``): a subscriber long-polls for new events instead of polling history,
follows continue-as-new by itself, and resumes from any offset — an event's ``seq`` is its offset, so a client
that lost its connection asks again from ``last seq + 1``. Once the run has closed, the rest comes from its archive
(``activities/run_archive.py``): hartflow clients refuse queries of closed runs (``NOT_OPEN``), so no worker
replays one to answer.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

from temporalio.client import Client, WorkflowQueryRejectedError
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from activities.run_archive import ArchivedEvent
from workflows.run import PROGRESS_TOPIC

Event = dict[str, Any]
Archived = Callable[[int], Awaitable[list[ArchivedEvent] | None]]
"""A closed run's progress events from an offset on, from its archive (``None``: it has none)."""

SETTLED = frozenset({"awaiting_input", "run_finished"})
"""Events after which a run publishes nothing more until someone acts: it waits for an answer, or it ended."""

_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


async def stream_offset(client: Client, workflow_id: str) -> int:
    """The offset the next progress event of the thread's current run will get."""
    return await WorkflowStreamClient.create(client, workflow_id).get_offset()


async def follow(
    client: Client,
    workflow_id: str,
    show: Callable[[Event], None],
    *,
    offset: int = 0,
    until: int | None = None,
    archived: Archived | None = None,
) -> None:
    """Pass the run's progress events from ``offset`` on to ``show``: until the run settles (pauses or ends),
    or with ``until``, up to the event before that offset. A run that closes meanwhile is read on from
    ``archived``."""
    if until is not None and offset >= until:
        return

    def last(at: int, event: Event) -> bool:
        return at + 1 >= until if until is not None else event.get("kind") in SETTLED

    stream = WorkflowStreamClient.create(client, workflow_id)
    try:
        async for item in stream.subscribe([PROGRESS_TOPIC], from_offset=offset, result_type=dict[str, Any]):
            show(item.data)
            offset = item.offset + 1
            if last(item.offset, item.data):
                return
    except WorkflowQueryRejectedError:
        if archived is None:
            raise
        for event in await archived(offset) or []:
            show(event.data)
            if last(event.offset, event.data):
                return


def json_lines() -> Callable[[Event], None]:
    """``--events``: one JSON object per line on stdout, flushed at once so a pipe sees each event as it happens."""

    def show(event: Event) -> None:
        print(json.dumps(event, ensure_ascii=False, default=str), flush=True)

    return show


class ProgressPrinter:
    """The progress lines people see on stderr while a run goes. On a terminal, a spinner line also shows
    what the run is waiting on (the model, a tool) until the next event replaces it."""

    def __init__(self, out: TextIO | None = None) -> None:
        self._out = out or sys.stderr
        self._live = self._out.isatty()
        self._waiting_on: str | None = None
        self._spinner: asyncio.Task[None] | None = None

    def __call__(self, event: Event) -> None:
        line = describe(event)
        if line is None:
            return
        self._clear()
        print(f"  · {line}", file=self._out, flush=True)
        self._waiting_on = _waiting_on(event)
        if self._live and self._waiting_on and self._spinner is None:
            self._spinner = asyncio.get_running_loop().create_task(self._spin())

    def close(self) -> None:
        if self._spinner is not None:
            self._spinner.cancel()
            self._spinner = None
        self._clear()

    def _clear(self) -> None:
        if self._live:
            print("\r\033[K", end="", file=self._out, flush=True)

    async def _spin(self) -> None:
        for frame in itertools.cycle(_SPINNER):
            if self._waiting_on:
                print(f"\r\033[K  {frame} {self._waiting_on}", end="", file=self._out, flush=True)
            await asyncio.sleep(0.1)


def describe(event: Event) -> str | None:
    """One line for a person, or ``None`` for events only machines care about."""
    kind = event.get("kind")
    if kind == "model_call":
        return f"turn {event.get('turn')}: calling the model"
    if kind == "llm_retry":
        wait = (event.get("wait_ms") or 0) / 1000
        return (
            f"model call failed ({event.get('reason')}): retry {event.get('attempt')}/{event.get('max_attempts')} "
            f"in {wait:.1f} s"
        )
    if kind == "llm_circuit_wait":
        return f"model circuit {event.get('phase')}: waiting {(event.get('wait_ms') or 0) / 1000:.1f} s"
    if kind == "tool_call":
        args = f" {event['args']}" if event.get("args") else ""
        return f"tool {event.get('tool')}{args}"
    if kind == "tool_result":
        return f"tool {event.get('tool')} → {event.get('status')}"
    if kind == "awaiting_input":
        return f"paused: waiting for an answer to “{event.get('question')}”"
    if kind == "resumed":
        return "answer received, resuming"
    if kind == "summarized":
        return f"summarized {event.get('summarized')} earlier message(s)"
    if kind in ("loop_warning", "loop_forced_stop"):
        return f"loop detection: {kind.removeprefix('loop_').replace('_', ' ')}"
    if kind == "stopped":
        return f"stopped: {event.get('reason')}"
    if kind == "subagent_started":
        return f"subagent started: {event.get('description')} ({event.get('workflow_id')})"
    if kind == "subagent_finished":
        return f"subagent {event.get('description')} → {event.get('status')}"
    if kind == "subagent_limit":
        return f"subagent limit: dropped {len(event.get('dropped') or [])} task call(s)"
    return None


def _waiting_on(event: Event) -> str | None:
    kind = event.get("kind")
    if kind == "model_call":
        return f"turn {event.get('turn')}: the model is thinking…"
    if kind == "tool_call":
        return f"tool {event.get('tool')} running…"
    if kind == "llm_retry":
        return "waiting to retry the model call…"
    if kind == "subagent_started":
        return "subagents running…"
    return None
