"""``hartflow run`` / ``reply``: the answer printed while the model generates it.

Wraps the command's progress display: after a ``model_call`` event the call's live tokens are read from the
thread's storage (``workers/client/live_tokens.py``, the reader the Agent Server uses too) until the next event
that ends the call. For people the text goes to stdout as it arrives (the progress lines stay on stderr); with
``--events`` each batch is a JSON line ``{"kind": "chunk", "call", "message_id", "attempt", "index", "content",
"chunk"}`` between the progress events. When a call's attempt dies mid-answer and a retry starts over, people see
a restart marker and the retry's text; ``--events`` gets ``{"kind": "chunk_void", "call", "message_id",
"attempt"}``: the text of earlier attempts is not part of the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Callable
from typing import Any, TextIO

from activities.storage import ObjectStore
from workers import progress
from workers.client.live_tokens import POLL_SECONDS, LiveCall, LivePiece, live_pieces, streams_tokens

_DURING_CALL = frozenset({"llm_retry", "llm_circuit_wait"})
"""Events a model call publishes while it runs: the call goes on after them."""


class LiveAnswer:
    """A progress ``show`` callback that also passes on the live tokens of each model call."""

    def __init__(
        self,
        objects: ObjectStore,
        chain: str,
        show: Callable[[progress.Event], None],
        *,
        events: bool,
        out: TextIO | None = None,
    ) -> None:
        self._objects = objects
        self._chain = chain
        self._show = show
        self._events = events
        self._out = out or sys.stdout
        self._queue: asyncio.Queue[progress.Event | None] = asyncio.Queue()
        self._reading: asyncio.Task[None] | None = None
        self._call: LiveCall | None = None
        self._text = ""
        self.shown: str | None = None
        """The text of the last call's answer as printed for people, ``None`` when it printed none."""

    def __call__(self, event: progress.Event) -> None:
        if self._reading is None:
            self._reading = asyncio.get_running_loop().create_task(self._read_all())
        self._queue.put_nowait(event)

    async def finish(self) -> None:
        """Pass on what is left (the last call's batches, the queued events), then stop."""
        if self._reading is not None:
            self._queue.put_nowait(None)
            await self._reading
        self._close_printer()

    async def _read_all(self) -> None:
        pending: asyncio.Task[progress.Event | None] | None = None
        try:
            while True:
                pending = pending or asyncio.ensure_future(self._queue.get())
                if self._call is not None and not (await asyncio.wait({pending}, timeout=POLL_SECONDS))[0]:
                    await self._pass_on()
                    continue
                event = await pending
                pending = None
                if event is None or event.get("kind") not in _DURING_CALL:
                    await self._end_call()
                if event is None:
                    return
                self._show(event)
                if streams_tokens(event) and isinstance(event.get("seq"), int):
                    self._call, self._text, self.shown = LiveCall(self._chain, event["seq"]), "", None
        finally:
            if pending is not None and not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pending

    async def _end_call(self) -> None:
        if self._call is None:
            return
        await self._pass_on()  # the batches written before the call ended
        self._call = None
        if self._text and not self._events:
            print(file=self._out, flush=True)

    async def _pass_on(self) -> None:
        call = self._call
        assert call is not None
        for piece in await live_pieces(self._objects, call):
            if self._events:
                print(json.dumps(_event(call.anchor, piece), ensure_ascii=False), file=self._out, flush=True)
            else:
                self._print(piece)

    def _print(self, piece: LivePiece) -> None:
        if piece.chunk is None:
            marker = f"\n↻ the model call restarted (attempt {piece.attempt}): the text above is void\n"
            print(marker, file=self._out, flush=True)
            self._text, self.shown = "", None
            return
        text = chunk_text(piece.chunk)
        if not text:
            return
        self._close_printer()  # a spinner line would overwrite the text
        print(text, end="", file=self._out, flush=True)
        self._text += text
        self.shown = self._text

    def _close_printer(self) -> None:
        if isinstance(self._show, progress.ProgressPrinter):
            self._show.close()


def _event(anchor: int, piece: LivePiece) -> dict[str, Any]:
    where = {"call": anchor, "message_id": piece.message_id, "attempt": piece.attempt}
    if piece.chunk is None:
        return {"kind": "chunk_void", **where}
    return {"kind": "chunk", **where, "index": piece.index, "content": chunk_text(piece.chunk), "chunk": piece.chunk}


def chunk_text(chunk: dict[str, Any]) -> str:
    """The text of a chunk's content: a string, or the text blocks of a list (a provider's content blocks)."""
    content = chunk.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(block.get("text") or "") for block in content if isinstance(block, dict) and block.get("type") == "text"
        )
    return ""
