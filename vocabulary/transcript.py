"""Content-addressed transcripts: a model request names its messages instead of carrying them.

Sending the whole message list with every model call makes each turn's history cost grow with the conversation
(O(n) per turn, O(n²) per run). Instead, every message is identified by the sha256 of its canonical JSON, a
list of messages by the sha256 of its ids (its *manifest*), and the run remembers the list it sent last. The next
request is a :class:`~vocabulary.contracts.TranscriptRef`: the previous manifest, how long a prefix of it still
holds, the ids after that prefix, and the bodies of only the messages the previous request did not carry. The
model activity (``activities/transcripts.py``) stores new bodies and the new manifest in the thread's blob store
before calling the model, so a later request — on any worker, after any crash — can build on it.

Everything here is pure and deterministic (hashing and JSON), so it runs in workflow code.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from langchain_core.messages import BaseMessage

from vocabulary.contracts import ThreadRef, TranscriptRef


def canonical_json(message: BaseMessage) -> str:
    """The message as ``{"type", "data"}`` (langchain's ``message_to_dict`` shape) in canonical JSON: sorted
    keys, no whitespace. ``messages_from_dict`` rebuilds it."""
    document = {"type": message.type, "data": message.model_dump(mode="json")}
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def manifest_id(ids: Sequence[str]) -> str:
    """The id of a message list: the sha256 of its message ids, one per line (the stored manifest's text)."""
    return sha256_hex(manifest_text(ids))


def manifest_text(ids: Sequence[str]) -> str:
    return "\n".join(ids)


class MessageHasher:
    """Message ids by object identity, so a turn hashes only the messages it has not seen.

    Workflow code never changes a message in place — every change is a new message through the reducers or a
    request overlay — so a message object keeps the id it was hashed to. Entries for messages that left the list
    are dropped at each call. Per workflow run (not carried across continue-as-new): the first turn of a run
    hashes everything once."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[BaseMessage, str]] = {}

    def hash(self, messages: Sequence[BaseMessage]) -> tuple[list[str], dict[str, str]]:
        """The ids of ``messages``, and the canonical JSON of those hashed just now, by id."""
        seen: dict[int, tuple[BaseMessage, str]] = {}
        ids: list[str] = []
        bodies: dict[str, str] = {}
        for message in messages:
            entry = self._seen.get(id(message))
            if entry is None or entry[0] is not message:
                body = canonical_json(message)
                entry = (message, sha256_hex(body))
                bodies[entry[1]] = body
            seen[id(message)] = entry
            ids.append(entry[1])
        self._seen = seen
        return ids, bodies


@dataclass
class TranscriptCursor:
    """The last message list a run chain sent to the model, as ids; carried across continue-as-new."""

    manifest: str | None = None
    ids: list[str] = field(default_factory=list)

    def reference(
        self, thread: ThreadRef, messages: Sequence[BaseMessage], hasher: MessageHasher | None = None
    ) -> tuple[TranscriptRef, TranscriptCursor]:
        """The reference for sending ``messages`` next, and the cursor to keep once that call succeeded (a
        failed call may not have stored its manifest, so the caller keeps the old cursor then)."""
        ids, bodies = (hasher or MessageHasher()).hash(messages)
        keep = 0
        if self.manifest is not None:
            limit = min(len(ids), len(self.ids))
            while keep < limit and ids[keep] == self.ids[keep]:
                keep += 1
        known = set(self.ids)
        append = ids[keep:]
        needed = [message_id for message_id in dict.fromkeys(append) if message_id not in known]
        if any(message_id not in bodies for message_id in needed):
            # Hashed on an earlier turn whose call failed (so the store may lack it): serialise it again.
            for message, message_id in zip(messages, ids, strict=True):
                bodies.setdefault(message_id, canonical_json(message))
        reference = TranscriptRef(
            thread=thread,
            base=self.manifest if keep else None,
            keep=keep,
            append=append,
            bodies={message_id: bodies[message_id] for message_id in needed},
            digest=manifest_id(ids),
        )
        return reference, TranscriptCursor(reference.digest, ids)
