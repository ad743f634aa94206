"""A model call's live tokens, read from the thread's storage while the call runs and framed as LangGraph streams
them: ``messages`` ``[AIMessageChunk, metadata]`` whose id is the final message's (``vocabulary/live_tokens.py``
has the layout, ``activities/live_tokens.py`` the writer).

A call is announced by its ``model_call`` progress event (the anchor); its batches are read until the next state
item arrives (the complete message, which then needs no ``messages`` frame of its own: the client already holds it
as chunks; ``values`` carries it whole). A frame's id is ``{anchor}-{n}.{attempt}.{index}`` (``n``: how many frames
the anchor's own item gave), so ``Last-Event-ID`` resumes at the next batch on any replica. When a later attempt
starts, the client is told the earlier one's text is void: a ``remove`` message under the same id (LangGraph's
``RemoveMessage``; ``useStream`` then starts the message over with the retry's chunks).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from activities.storage import ObjectStore
from vocabulary.live_tokens import batch_position, call_prefix

POLL_SECONDS = 0.03
"""How often an open call's folder is listed while no durable item arrives."""


@dataclass
class LiveCall:
    """One model call being followed by one reader."""

    chain: str
    anchor: int
    frames_before: int
    """How many frames the anchor's own item gave: token frames number on from there."""
    poll: bool = True
    """Read the batches (the run is open)."""
    after: tuple[int, int] | None = None
    """The last ``(attempt, index)`` framed (or resumed after)."""
    message_id: str | None = None
    streamed: bool = False
    """The client holds chunks of this call (framed here, or before its ``Last-Event-ID``)."""
    attempts: set[int] = field(default_factory=set)

    def frame_id(self, attempt: int, index: int) -> str:
        return f"{self.anchor}-{self.frames_before}.{attempt}.{index}"

    def position(self, attempt: int, index: int) -> tuple[int, int, int, int]:
        return (self.anchor, self.frames_before, attempt, index)


def _read(store: ObjectStore, call: LiveCall) -> list[dict[str, Any]]:
    """The call's batches after ``call.after`` (an index is the batch's seq + 1: 0 is the attempt's void frame)."""
    found = []
    for info in store.list(call_prefix(call.chain, call.anchor)):
        position = batch_position(info.key)
        if position is None:
            continue
        attempt, seq = position
        if call.after is not None and (attempt, seq + 1) <= call.after:
            continue
        found.append((position, info.key))
    batches = []
    for _position, key in sorted(found):
        data = store.get(key)
        if data is None:
            break  # dropped since it was listed: its call is folded into the state
        try:
            body = json.loads(data)
        except ValueError:
            break
        if isinstance(body, dict) and isinstance(body.get("chunk"), dict):
            batches.append(body)
    return batches


async def token_frames(store: ObjectStore, call: LiveCall, meta: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """``(id, event, data)`` of the call's batches since the last read, void frames where an attempt restarts."""
    frames: list[tuple[str, str, Any]] = []
    for batch in await asyncio.to_thread(_read, store, call):
        attempt, seq, message_id = int(batch["attempt"]), int(batch["seq"]), str(batch["message_id"])
        if call.attempts and attempt > max(call.attempts) and call.streamed:
            call.message_id = message_id
            frames.append((call.frame_id(attempt, 0), "messages", [{"type": "remove", "id": message_id}, meta]))
        call.attempts.add(attempt)
        call.message_id = message_id
        call.after = (attempt, seq + 1)
        call.streamed = True
        frames.append((call.frame_id(attempt, seq + 1), "messages", [batch["chunk"], meta]))
    return frames
