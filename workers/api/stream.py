"""One API run's events, read from its workflow stream and framed the way LangGraph clients read them.

The run publishes its state (topic ``messages``, ``workflows/run/state_stream.py``) and its progress events (topic
``progress``) on one durable stream. A reader folds the state items from the stream's start (a resumed
segment's ``values`` include what came before it) and turns each item of the segment into frames:

* ``messages`` item → ``messages`` ``[message, metadata]`` (mode ``messages-tuple``), ``updates``
  ``{node: {messages: [message]}}``, ``values`` (the whole state so far), all as clients are served them
  (``workers/api/served.py``: an internal message gives only ``values``);
* ``progress`` item → ``custom`` (the event as the run published it); the pause also gives ``updates``
  ``{__interrupt__: [...]}`` and ``values`` carrying ``__interrupt__``.

The segment ends at its run's pause (``awaiting_input``) or end (``run_finished``). A frame's id is
``{offset}-{n}``: the stream offset of its item and its place among that item's frames, so it is the same on
every replica and after any restart, and ``Last-Event-ID`` resumes right after it.

While a model call runs, its live tokens are framed between the durable items (``workers/api/live_tokens.py``),
for clients that asked for ``messages-tuple``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from fastapi import HTTPException
from temporalio.client import Client, WorkflowFailureError, WorkflowQueryRejectedError
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from activities.run_archive import load_run_archive
from activities.storage import ObjectStore
from vocabulary.contracts import ThreadRef
from vocabulary.live_tokens import chain_prefix
from workers.api import status
from workers.api.limits import event_id
from workers.api.live_tokens import LiveCall, token_frames
from workers.api.outages import riding_out, storage_down, unreachable
from workers.api.records import RunRecord
from workers.api.served import error_frame, interrupt_value, served_message, served_values
from workers.api.status import Chain, pending_request
from workers.client.live_tokens import POLL_SECONDS, streams_tokens
from workflows.run import PROGRESS_TOPIC
from workflows.run.state_stream import MESSAGES_TOPIC, fold

_ENDS = frozenset({"awaiting_input", "run_finished"})
_CALL_ENDS = frozenset({"model_call", *_ENDS})
_NODES = {"ai": "model", "tool": "tools"}
_POLL_COOLDOWN = timedelta(milliseconds=50)
_log = logging.getLogger("hartflow.api")


@dataclass(frozen=True)
class Frame:
    event: str
    data: Any
    id: str | None = None


def _attempt_index(frame_id: str) -> tuple[int, int]:
    attempt, index = frame_id.rsplit(".", 2)[1:]
    return int(attempt), int(index)


def resume_point(last_event_id: str | None) -> tuple[int, ...] | None:
    """Where a reader resumes: after this frame, or ``None`` (no header, or ``-1``) from the run's start."""
    if last_event_id is None or last_event_id.strip() in ("", "-1"):
        return None
    point = event_id(last_event_id.strip())
    if point is None:
        raise HTTPException(422, f"Last-Event-ID {last_event_id[:40]!r} is not an event id of this server")
    return point


class RunFrames:
    """The frames of one run, for the stream modes asked."""

    def __init__(self, record: RunRecord, modes: list[str]) -> None:
        self.record = record
        self.modes = set(modes)
        self.values: dict[str, Any] | None = None
        self.outcome: dict[str, Any] | None = None
        """The event that ended the segment (``awaiting_input`` or ``run_finished``), once read."""
        self.live: LiveCall | None = None
        """The model call whose live tokens are being framed."""
        self.folded: LiveCall | None = None
        """The call that ended last: its complete message needs no ``messages`` frame if its chunks were sent."""

    def metadata(self) -> Frame:
        return Frame("metadata", {"run_id": self.record.run_id, "thread_id": self.record.thread_id, "attempt": 1})

    def interrupts(self) -> list[dict[str, Any]]:
        if self.outcome is None or self.outcome.get("kind") != "awaiting_input":
            return []
        request_id = self.outcome.get("request_id")
        request = pending_request(self.values, request_id) or {"request_id": request_id}
        return [{"id": str(request_id), "value": interrupt_value(request)}]

    def result(self) -> dict[str, Any]:
        """What ``runs.wait`` and ``runs.join`` answer: the last values, the interrupt, or the error."""
        if self.outcome is not None and self.outcome.get("status") == "error":
            return {"__error__": error_frame(self.record.run_id, self.outcome.get("error"))}
        values = dict(served_values(self.values) or {})
        if interrupts := self.interrupts():
            values["__interrupt__"] = interrupts
        return values

    def skip(self, topic: str, data: dict[str, Any]) -> None:
        """An item before the run's segment: only its state counts."""
        if topic == MESSAGES_TOPIC:
            self.values = fold(self.values, data)

    def frames_for(self, topic: str, data: dict[str, Any]) -> list[tuple[str, Any]]:
        frames: list[tuple[str, Any]] = []
        if topic == MESSAGES_TOPIC:
            self.values = fold(self.values, data)
            message = served_message(data["message"]) if data.get("kind") == "message" else None
            if message is not None:
                node = _NODES.get(str(message.get("type")), "__input__")
                meta = {"langgraph_node": node, "run_id": self.record.run_id, "thread_id": self.record.thread_id}
                self._add(frames, "messages-tuple", "messages", [message, meta])
                self._add(frames, "updates", "updates", {node: {"messages": [message]}})
            elif data.get("kind") == "channels":
                self._add(frames, "updates", "updates", {"model": data["values"]})
            self._add(frames, "values", "values", served_values(self.values))
            return frames
        if isinstance(data.get("error"), dict):  # the run's recorded error, as the error frame shows it
            shown = error_frame(self.record.run_id, data["error"])
            data = {**data, "error": {"type": shown["error"], "message": shown["message"]}}
        self._add(frames, "custom", "custom", data)
        if data.get("kind") in _ENDS:
            self.outcome = data
            if interrupts := self.interrupts():
                self._add(frames, "updates", "updates", {"__interrupt__": interrupts})
                frames.append(("values", {**(served_values(self.values) or {}), "__interrupt__": interrupts}))
            elif data.get("status") == "error":
                frames.append(("error", error_frame(self.record.run_id, data.get("error"))))
        return frames

    def streamed(self, event: str, data: Any) -> bool:
        """Whether this is the complete message of an answer the client holds as chunks (it is not sent again:
        LangGraph clients would add it to them; its place in the numbering stays, so ids match a replay's)."""
        folded = self.folded
        return event == "messages" and folded is not None and folded.streamed and data[0].get("id") == folded.message_id

    def follow(self, chain: str, offset: int, frames_before: int, after: tuple[int, ...] | None, *, poll: bool) -> None:
        """Start framing the live tokens of the model call announced at ``offset`` (``poll``: its run is open; a
        closed run's answers are whole in its state, and a client that resumes inside one holds its chunks)."""
        self.live = LiveCall(chain, offset, frames_before=frames_before, poll=poll)
        if after is not None and len(after) == 4 and after[:2] == (offset, frames_before):
            self.live.after, self.live.attempts, self.live.streamed = (after[2], after[3]), {after[2]}, True

    async def tokens(self, objects: ObjectStore, after: tuple[int, ...] | None) -> list[Frame]:
        call = self.live
        if call is None:
            return []
        meta = {"langgraph_node": "model", "run_id": self.record.run_id, "thread_id": self.record.thread_id}
        found = await token_frames(objects, call, meta)
        if "messages-tuple" not in self.modes:
            return []
        return [
            Frame(event, data, frame_id)
            for frame_id, event, data in found
            if after is None or call.position(*_attempt_index(frame_id)) > after
        ]

    def _add(self, frames: list[tuple[str, Any]], mode: str, event: str, data: Any) -> None:
        if mode in self.modes:
            frames.append((event, data))


async def _items(
    client: Client, objects: ObjectStore, thread: ThreadRef, record: RunRecord, current: Chain
) -> AsyncIterator[tuple[int, str, dict[str, Any]]]:
    """The stream items of the run's workflow chain, offset order: from the live workflow stream while the
    chain is open, else (also when it closes while being read) from its run archive: no worker, no replay.
    A server restart while the chain is open is ridden out: the subscription starts again after the last item."""
    next_offset = 0
    while current.first_run_id == record.workflow_run_id and current.active:
        stream = WorkflowStreamClient.create(client, record.workflow_id)
        items = stream.subscribe(
            [MESSAGES_TOPIC, PROGRESS_TOPIC], from_offset=next_offset, result_type=dict, poll_cooldown=_POLL_COOLDOWN
        )
        try:
            async for item in items:
                yield item.offset, item.topic, item.data
                next_offset = item.offset + 1
            return
        except WorkflowQueryRejectedError:
            break  # it closed before its last items were read: the archive it wrote before closing has them
        except Exception as exc:
            if not unreachable(exc):
                raise
            _log.warning("Temporal unreachable while streaming %s, subscribing again: %s", record.workflow_id, exc)
        finally:
            await items.aclose()  # type: ignore[attr-defined]  # an async generator, typed as its iterator
        current = await riding_out(lambda: status.chain(client, thread), f"streaming {record.workflow_id}")
    archive = await riding_out(
        lambda: load_run_archive(objects, thread.user_id, thread.thread_id, record.workflow_run_id),
        f"reading the archive of {record.workflow_id}",
        outage=storage_down,
        service="storage",
    )
    for event in archive.events if archive is not None else []:
        if event.offset >= next_offset:
            yield event.offset, event.topic, event.data
    # No archive: the chain closed before runs were archived, and its stream went with it.


async def run_frames(
    client: Client,
    objects: ObjectStore,
    thread: ThreadRef,
    frames: RunFrames,
    after: tuple[int, ...] | None,
    current: Chain,
) -> AsyncIterator[Frame]:
    """The run's frames after ``after`` (all of them for ``None``), ending when its segment ends. A segment that
    ends the run ends once its workflow closed, so a client that saw the end reads the run's final status."""
    record = frames.record
    items = _items(client, objects, thread, record, current)
    follow = current.active and "messages-tuple" in frames.modes
    chain = chain_prefix(thread.user_id, thread.thread_id, record.workflow_run_id)
    pending: asyncio.Future[tuple[int, str, dict[str, Any]]] | None = None
    try:
        while True:
            pending = pending or asyncio.ensure_future(anext(items))
            polling = frames.live is not None and frames.live.poll
            if polling and not (await asyncio.wait({pending}, timeout=POLL_SECONDS))[0]:
                for frame in await frames.tokens(objects, after):
                    yield frame
                continue
            try:
                offset, topic, data = await pending
            except StopAsyncIteration:
                break
            pending = None
            if offset < record.start_offset:
                frames.skip(topic, data)
                continue
            if frames.live is not None and (topic == MESSAGES_TOPIC or data.get("kind") in _CALL_ENDS):
                for frame in (
                    await frames.tokens(objects, after) if frames.live.poll else []
                ):  # the batches written before the call ended
                    yield frame
                frames.folded, frames.live = frames.live, None
            produced = frames.frames_for(topic, data)
            for index, (event, payload) in enumerate(produced):
                if (after is None or (offset, index) > after) and not frames.streamed(event, payload):
                    yield Frame(event, payload, f"{offset}-{index}")
            if "messages-tuple" in frames.modes and topic == PROGRESS_TOPIC and streams_tokens(data):
                frames.follow(chain, offset, len(produced), after, poll=follow)
            if frames.outcome is not None:
                break
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending
        await items.aclose()  # type: ignore[attr-defined]
    if frames.outcome is not None and frames.outcome.get("kind") == "run_finished" and current.active:
        with contextlib.suppress(WorkflowFailureError):  # failed or cancelled: the frames said so already
            handle = client.get_workflow_handle(record.workflow_id)
            await riding_out(handle.result, f"waiting for {record.workflow_id} to close")
