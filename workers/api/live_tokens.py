"""A model call's live tokens framed as LangGraph streams them: ``messages`` ``[AIMessageChunk, metadata]`` whose
id is the final message's (``workers/client/live_tokens.py`` reads them from the thread's storage).

A call is announced by its ``model_call`` progress event (the anchor); its batches are read until the next state
item arrives (the complete message, which then needs no ``messages`` frame of its own: the client already holds it
as chunks; ``values`` carries it whole). A frame's id is ``{anchor}-{n}.{attempt}.{index}`` (``n``: how many frames
the anchor's own item gave), so ``Last-Event-ID`` resumes at the next batch on any replica. When a later attempt
starts, the client is told the earlier one's text is void: a ``remove`` message under the same id (LangGraph's
``RemoveMessage``; ``useStream`` then starts the message over with the retry's chunks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from activities.storage import ObjectStore
from workers.client import live_tokens


@dataclass
class LiveCall(live_tokens.LiveCall):
    """One model call being framed for one API client."""

    frames_before: int = 0
    """How many frames the anchor's own item gave: token frames number on from there."""
    poll: bool = True
    """Read the batches (the run is open)."""

    def frame_id(self, attempt: int, index: int) -> str:
        return f"{self.anchor}-{self.frames_before}.{attempt}.{index}"

    def position(self, attempt: int, index: int) -> tuple[int, int, int, int]:
        return (self.anchor, self.frames_before, attempt, index)


async def token_frames(store: ObjectStore, call: LiveCall, meta: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """``(id, event, data)`` of the call's batches since the last read, void frames where an attempt restarts."""
    return [
        (
            call.frame_id(piece.attempt, piece.index),
            "messages",
            [piece.chunk if piece.chunk is not None else {"type": "remove", "id": piece.message_id}, meta],
        )
        for piece in await live_tokens.live_pieces(store, call)
    ]
