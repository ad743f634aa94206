"""A model call's answer published while it is generated: token batches written to the thread's storage (the
side channel of ``vocabulary/live_tokens.py``), batched by time and by size so a fast provider costs a few writes
a second, not one per token.

Each batch is the merge of the chunks the provider sent since the previous one (text concatenated, tool-call
deltas merged by index), stored as ``{message_id, attempt, seq, chunk}`` where ``chunk`` is an ``AIMessageChunk``
in ``model_dump`` form whose id is the final message's. Publishing is best effort: a failed write keeps its chunks
for the next flush, and never fails the model call, whose durable result is the complete message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, InvalidToolCall, message_chunk_to_message
from langchain_core.messages.ai import add_ai_message_chunks
from langchain_core.runnables import Runnable
from temporalio import activity

from activities.models.tool_args import object_args_error
from activities.storage import ObjectStore
from vocabulary.contracts import LiveTokens
from vocabulary.live_tokens import batch_key, call_prefix

FLUSH_SECONDS = 0.05
"""A chunk waits at most this long before it is written (the goal: at a client within 150 ms of the provider)."""
FLUSH_CHARS = 2048
"""A batch this long is written at once, whatever the time."""


class TokenBatcher:
    """Collects one attempt's chunks and writes them as numbered batches."""

    def __init__(
        self, store: ObjectStore, live: LiveTokens, attempt: int, message_id: str, flush_seconds: float = FLUSH_SECONDS
    ) -> None:
        self._store = store
        self._flush_seconds = flush_seconds
        self._live = live
        self._attempt = attempt
        self._message_id = message_id
        self._pending: list[AIMessageChunk] = []
        self._pending_size = 0
        self._since = 0.0
        self._seq = 0
        self._failing = False
        self._lock = asyncio.Lock()
        self.batches = 0

    def add(self, chunk: AIMessageChunk) -> bool:
        """Queue ``chunk``; ``True`` when the batch is due for writing."""
        if not self._pending:
            self._since = time.monotonic()
        self._pending.append(chunk)
        self._pending_size += _text_size(chunk)
        return self._pending_size >= FLUSH_CHARS or time.monotonic() - self._since >= self._flush_seconds

    async def flush(self) -> None:
        async with self._lock:
            if not self._pending:
                return
            pending = merged(self._pending)
            self._pending, self._pending_size = [], 0
            shown = pending.model_copy(update={"id": self._message_id})
            body = {
                "message_id": self._message_id,
                "attempt": self._attempt,
                "seq": self._seq,
                "chunk": shown.model_dump(mode="json"),
            }
            key = batch_key(self._live.chain, self._live.anchor, self._attempt, self._seq)
            try:
                await asyncio.to_thread(self._store.put, key, json.dumps(body).encode())
            except Exception as exc:  # best effort: the chunks go out with the next batch
                if not self._failing:  # once per outage, not once per batch
                    activity.logger.warning("could not publish live tokens, keeping them for the next batch: %s", exc)
                self._failing = True
                self._pending, self._pending_size = [pending, *self._pending], _text_size(pending) + self._pending_size
                return
            self._failing = False
            self._seq += 1
            self.batches += 1

    async def tick(self) -> None:
        """Write a waiting batch when its time is up, so a pause in the provider's output delays nothing."""
        while True:
            await asyncio.sleep(self._flush_seconds)
            if self._pending and time.monotonic() - self._since >= self._flush_seconds:
                await self.flush()


def merged(chunks: list[AIMessageChunk]) -> AIMessageChunk:
    """The chunks as one, merged in a single pass (adding them pairwise would rebuild the text once per chunk)."""
    return chunks[0] if len(chunks) == 1 else add_ai_message_chunks(chunks[0], *chunks[1:])


def _text_size(chunk: AIMessageChunk) -> int:
    content = chunk.content
    size = len(content) if isinstance(content, str) else len(json.dumps(content))
    return size + sum(len(str(part.get("args") or "")) for part in chunk.tool_call_chunks)


async def stream_answer(
    runnable: Runnable[LanguageModelInput, AIMessage],
    messages: list[BaseMessage],
    batcher: TokenBatcher,
) -> AIMessage:
    """The complete message, built from the chunks of ``runnable.astream`` while they are published."""
    received: list[AIMessageChunk] = []
    ticking = asyncio.create_task(batcher.tick())
    try:
        async for chunk in _chunks(runnable, messages):
            received.append(chunk)
            if batcher.add(chunk):
                await batcher.flush()
        await batcher.flush()
    finally:
        ticking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticking
    if not received:
        raise ValueError("the model's stream ended without a chunk")
    message = message_chunk_to_message(merged(received))
    assert isinstance(message, AIMessage)
    message.invalid_tool_calls = [_explained(call) for call in message.invalid_tool_calls]
    return message


def _explained(call: InvalidToolCall) -> InvalidToolCall:
    """A streamed call whose arguments did not parse into an object says why, as a complete reply's would
    (``activities/models/tool_args.py``)."""
    if call.get("error") is not None:
        return call
    try:
        problem = object_args_error(json.loads(call.get("args") or "{}"))
    except ValueError as exc:
        problem = f"the arguments are not valid JSON: {exc}"
    return {**call, "error": f"Function {call.get('name') or '?'}: {problem}"}


async def _chunks(
    runnable: Runnable[LanguageModelInput, AIMessage], messages: list[BaseMessage]
) -> AsyncIterator[AIMessageChunk]:
    async for chunk in runnable.astream(messages):
        if isinstance(chunk, AIMessageChunk):
            yield chunk


def drop_folded_calls(store: ObjectStore, live: LiveTokens) -> None:
    """Delete the batches of the chain's earlier calls: their complete messages are in the run's state now."""
    own = call_prefix(live.chain, live.anchor)
    for key in {info.key[: len(own)] for info in store.list(f"{live.chain}/")}:
        if key < own:
            store.delete_prefix(key)
