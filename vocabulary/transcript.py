"""Content-addressed transcripts: a model request names its messages instead of carrying them.

Sending the whole message list with every model call makes each turn's history cost grow with the conversation
(O(n) per turn, O(n²) per run). Instead, every message is identified by the sha256 of its canonical JSON, a
list of messages by the sha256 of its ids (its *manifest*), and the run remembers the list it sent last. The next
request is a :class:`~vocabulary.contracts.TranscriptRef`: the previous manifest, how long a prefix of it still
holds, the ids after that prefix, and the bodies of only the messages the previous request did not carry. The
model activity (``activities/transcripts.py``) stores new bodies and the new manifest in the thread's blob store
before calling the model, so a later request — on any worker, after any crash — can build on it.

The system message and tool schemas (the *preamble*, ~8 KB that every agent request repeats) go the same way:
named by the sha256 of their JSON, sent in full only when the previous request of the run sent a different one.
A manifest is stored as the full id list every ``FULL_MANIFEST_EVERY`` requests and as a delta on the previous
one (``keep`` and ``append``) in between, so a turn writes what changed, not the whole list, and a cold read
follows at most ``FULL_MANIFEST_EVERY`` links.

Everything here is pure and deterministic (hashing and JSON), so it runs in workflow code.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage, messages_from_dict

from vocabulary.contracts import ThreadRef, TranscriptRef
from vocabulary.messages import extends

FULL_MANIFEST_EVERY = 32
"""A full manifest after this many chained deltas: a cold read costs at most this many small reads, and a turn
writes ~1/32 of the id list on average instead of all of it."""


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


def delta_text(base: str, keep: int, base_depth: int, append: Sequence[str]) -> str:
    """A delta manifest: a header line ``{base} {keep} {base_depth}``, then the appended ids, one per line."""
    return "\n".join([f"{base} {keep} {base_depth}", *append])


def parse_delta(text: str) -> tuple[str, int, int, list[str]]:
    """``(base, keep, base_depth, append)`` of a :func:`delta_text`."""
    header, *append = text.split("\n")
    base, keep, base_depth = header.split(" ")
    return base, int(keep), int(base_depth), append


def preamble_json(system_message: SystemMessage | None, tools: Sequence[dict[str, Any]]) -> str:
    """The system message (``{"type", "data"}``) and the tool schemas as one JSON text. Keys keep their order:
    the schemas reach the model exactly as the workflow built them."""
    system = None if system_message is None else {"type": system_message.type, "data": system_message.model_dump()}
    return json.dumps({"system": system, "tools": list(tools)}, separators=(",", ":"), ensure_ascii=False)


def parse_preamble(text: str) -> tuple[SystemMessage | None, list[dict[str, Any]]]:
    document = json.loads(text)
    system = None
    if document["system"] is not None:
        (message,) = messages_from_dict([document["system"]])
        assert isinstance(message, SystemMessage)
        system = message
    return system, list(document["tools"])


class MessageHasher:
    """Message ids by object identity, so a turn hashes only the messages it has not seen.

    Workflow code never changes a message in place — every change is a new message through the reducers or a request
    overlay — so a message object keeps the id it was hashed to. A list that extends the last one is only looked at
    past it; otherwise entries for messages that left the list are dropped. Per workflow run (not carried across
    continue-as-new): the first turn of a run hashes everything once."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[BaseMessage, str]] = {}
        self._last: tuple[list[BaseMessage], list[str]] = ([], [])

    def hash(self, messages: Sequence[BaseMessage]) -> tuple[list[str], dict[str, str]]:
        """The ids of ``messages``, and the canonical JSON of those hashed just now, by id."""
        ids: list[str] = []
        bodies: dict[str, str] = {}
        last_messages, last_ids = self._last
        if last_messages and extends(messages, last_messages):
            # Only appended to: the usual turn looks at its new messages alone.
            ids.extend(last_ids)
            for message in messages[len(last_messages) :]:
                entry = self._entry(message, bodies)
                self._seen[id(message)] = entry
                ids.append(entry[1])
            self._last = (list(messages), ids)
            return list(ids), bodies
        seen: dict[int, tuple[BaseMessage, str]] = {}
        for message in messages:
            entry = self._entry(message, bodies)
            seen[id(message)] = entry
            ids.append(entry[1])
        self._seen = seen
        self._last = (list(messages), ids)
        return list(ids), bodies

    def _entry(self, message: BaseMessage, bodies: dict[str, str]) -> tuple[BaseMessage, str]:
        """``message`` and its id, hashed (its body added to ``bodies``) unless this object was hashed before."""
        entry = self._seen.get(id(message))
        if entry is None or entry[0] is not message:
            body = canonical_json(message)
            entry = (message, sha256_hex(body))
            bodies[entry[1]] = body
        return entry


@dataclass
class TranscriptCursor:
    """The last message list a run chain sent to the model, as ids; carried across continue-as-new."""

    manifest: str | None = None
    ids: list[str] = field(default_factory=list)
    depth: int = 0
    """How ``manifest`` is stored: 0 in full, n a delta n links from a full one."""
    preamble: str | None = None
    """The id of the preamble the last request sent (the store has it)."""

    def reference(
        self,
        thread: ThreadRef,
        messages: Sequence[BaseMessage],
        hasher: MessageHasher | None = None,
        preamble: str | None = None,
    ) -> tuple[TranscriptRef, TranscriptCursor]:
        """The reference for sending ``messages`` next, and the cursor to keep once that call succeeded (a
        failed call may not have stored its manifest, so the caller keeps the old cursor then).

        ``preamble`` (a :func:`preamble_json`) switches on the by-hash preamble and delta manifests; without it
        the reference is the one runs made before them (full manifests, system message and tools inline)."""
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
        base = self.manifest if keep else None
        preamble_id = None if preamble is None else sha256_hex(preamble)
        depth = self.depth + 1 if preamble is not None and base is not None else 0
        reference = TranscriptRef(
            thread=thread,
            base=base,
            keep=keep,
            append=append,
            bodies={message_id: bodies[message_id] for message_id in needed},
            digest=manifest_id(ids),
            depth=depth if depth < FULL_MANIFEST_EVERY else 0,
            base_depth=self.depth if base is not None else 0,
            preamble=preamble_id,
            preamble_body=preamble if preamble_id is not None and preamble_id != self.preamble else None,
        )
        return reference, TranscriptCursor(reference.digest, ids, reference.depth, preamble_id)
