"""Reading a model call's live tokens from the thread's storage while the call runs: the one reader the Agent
Server (``workers/api/live_tokens.py``, which frames them as LangGraph streams them) and the CLI
(``workers/cli/live_answer.py``, which prints them) share. ``vocabulary/live_tokens.py`` has the layout,
``activities/live_tokens.py`` the writer.

Each read returns the pieces written since the previous one, in order: a chunk (an ``AIMessageChunk`` in
``model_dump`` form whose id is the final message's), or, when a later attempt of the call starts after the reader
passed on chunks of an earlier one, a void piece first: the earlier attempt's text is not part of the answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from activities.storage import ObjectStore, StorageError
from vocabulary.live_tokens import batch_position, call_prefix

_log = logging.getLogger("hartflow.live_tokens")

POLL_SECONDS = 0.03
"""How often an open call's folder is listed while nothing else arrives."""


def streams_tokens(event: dict[str, Any]) -> bool:
    """Whether ``event`` announces a model call whose answer streams live tokens: a ``model_call`` event, unless it
    says ``live_tokens: false`` (runs started before the event said so may stream)."""
    return event.get("kind") == "model_call" and event.get("live_tokens", True) is not False


@dataclass(frozen=True)
class LivePiece:
    attempt: int
    index: int
    """The batch's seq + 1; 0 for the void piece that opens a restarted attempt."""
    message_id: str
    chunk: dict[str, Any] | None
    """The merged chunks of one batch; ``None``: the text passed on before this attempt is void."""


@dataclass
class LiveCall:
    """One model call being followed by one reader."""

    chain: str
    """The run chain's live folder (``vocabulary.live_tokens.chain_prefix``)."""
    anchor: int
    """The stream offset of the ``model_call`` progress event that announced the call."""
    after: tuple[int, int] | None = None
    """The last ``(attempt, index)`` passed on (or resumed after)."""
    message_id: str | None = None
    streamed: bool = False
    """The reader's client holds chunks of this call."""
    attempts: set[int] = field(default_factory=set)
    storage_away: bool = False
    """The last read found storage unavailable (said once per outage)."""


def _read(store: ObjectStore, call: LiveCall) -> list[dict[str, Any]]:
    """The call's batches after ``call.after``."""
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


async def live_pieces(store: ObjectStore, call: LiveCall) -> list[LivePiece]:
    """The call's pieces since the last read, a void piece where an attempt restarts after text was passed on.

    Storage away (a restart, an outage) reads as nothing new: the reader goes on following the run's durable
    events and picks the tokens up where it left them once storage answers (the final message is durable anyway).
    Ending the reader instead would end a client's stream for the sake of an extra."""
    pieces: list[LivePiece] = []
    try:
        batches = await asyncio.to_thread(_read, store, call)
    except StorageError as exc:
        if not call.storage_away:
            _log.warning("storage unavailable while reading live tokens, following the run without them: %s", exc)
        call.storage_away = True
        return pieces
    call.storage_away = False
    for batch in batches:
        attempt, seq, message_id = int(batch["attempt"]), int(batch["seq"]), str(batch["message_id"])
        if call.attempts and attempt > max(call.attempts) and call.streamed:
            pieces.append(LivePiece(attempt, 0, message_id, None))
        call.attempts.add(attempt)
        call.message_id = message_id
        call.after = (attempt, seq + 1)
        call.streamed = True
        pieces.append(LivePiece(attempt, seq + 1, message_id, batch["chunk"]))
    return pieces
