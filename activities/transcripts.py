"""The thread's message blobs: resolve a model request's :class:`TranscriptRef` into its messages.

Layout (on the configured object store, beside the thread's state):

    users/{user}/threads/{thread}/blobs/msg/{sha256}.json        one message, canonical JSON
    users/{user}/threads/{thread}/blobs/manifest/{sha256}.txt    one request's message ids, one per line
    users/{user}/threads/{thread}/blobs/manifest/{sha256}.delta  the same list as a delta on an earlier manifest
    users/{user}/threads/{thread}/blobs/preamble/{sha256}.json   a request's system message and tool schemas

All are content-addressed (a delta by the id of the list it stands for) and written create-only, so a retried
or duplicated activity writes the same bytes or nothing. A bounded in-process LRU cache keeps recent blobs and
id lists, so the usual turn — the same worker as the last one — reads nothing and writes only the new messages
and a small delta manifest. Every body and the resulting list are checked against their ids: a reference that
does not add up fails the call instead of sending the model a different conversation.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import posixpath
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from langchain_core.messages import BaseMessage, SystemMessage, messages_from_dict

from activities.storage import ObjectExistsError, ObjectStore
from vocabulary.contracts import ThreadRef, TranscriptRef
from vocabulary.transcript import (
    FULL_MANIFEST_EVERY,
    delta_text,
    manifest_id,
    manifest_text,
    parse_delta,
    parse_preamble,
    sha256_hex,
)

__all__ = ["Preamble", "TranscriptError", "TranscriptStore", "thread_blob_prefix"]

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
_PARSED_MESSAGES = 20_000
_LISTED_IDS = 1_000_000
_PARSED_PREAMBLES = 256
_MAX_LINKS = 4 * FULL_MANIFEST_EVERY
_WRITERS = 16
_MEMORY_ONLY_BODIES = 8
"""A reference carrying more new bodies (a run's first request on a long thread) is resolved on a thread: checking
and parsing them would hold the event loop."""

T = TypeVar("T")
V = TypeVar("V")
_memory_only: contextvars.ContextVar[bool] = contextvars.ContextVar("transcripts_memory_only", default=False)
Preamble = tuple[SystemMessage | None, list[dict[str, Any]]]


class TranscriptError(Exception):
    """A reference names a blob the store does not have, or does not match its digest."""


class _NotInMemory(Exception):
    """Resolving needs the store: a blob this process neither holds nor wrote."""


def thread_blob_prefix(thread: ThreadRef) -> str:
    return f"users/{thread.user_id}/threads/{thread.thread_id}/blobs/"


class _Lru(Generic[V]):
    """Thread-safe LRU by key, bounded by the total ``weigh`` of its values (text: its length; parsed
    messages: one each)."""

    def __init__(self, capacity: int, weigh: Callable[[V], int]) -> None:
        self._capacity = capacity
        self._weigh = weigh
        self._size = 0
        self._items: OrderedDict[str, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: str, value: V) -> None:
        weight = self._weigh(value)
        if weight > self._capacity:
            return
        with self._lock:
            previous = self._items.pop(key, None)
            if previous is not None:
                self._size -= self._weigh(previous)
            self._items[key] = value
            self._size += weight
            while self._size > self._capacity:
                _, evicted = self._items.popitem(last=False)
                self._size -= self._weigh(evicted)


class TranscriptStore:
    """Blob reads and writes for :class:`TranscriptRef` (sync: the model activity runs it in a thread, or on its
    event loop when :meth:`from_memory` finds it needs no store)."""

    def __init__(self, store: ObjectStore, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self._store = store
        self._cache: _Lru[str] = _Lru(cache_bytes, len)
        self._parsed: _Lru[BaseMessage] = _Lru(_PARSED_MESSAGES, lambda _: 1)
        self._lists: _Lru[list[str]] = _Lru(_LISTED_IDS, lambda ids: len(ids) + 1)
        self._resolved: _Lru[list[BaseMessage]] = _Lru(_LISTED_IDS, lambda messages: len(messages) + 1)
        self._preambles: _Lru[Preamble] = _Lru(_PARSED_PREAMBLES, lambda _: 1)
        # Cache keys name the store, so two stores in one process (tests, two homes) never share entries.
        self._scope = store.describe() + "|"
        # Long-lived threads, so the S3 store's per-thread clients are built once, not per request.
        self._writers = ThreadPoolExecutor(max_workers=_WRITERS, thread_name_prefix="transcript-writer")

    def from_memory(self, ref: TranscriptRef, resolve: Callable[[], T]) -> T | None:
        """``resolve()`` (:meth:`messages`, :meth:`preamble` of ``ref``) when it reads no blob this process does
        not hold and writes none it did not write already: the usual turn, on the worker that ran the turn before,
        which then costs no thread. ``None`` when it would reach the store, or ``ref`` brings many new bodies:
        call it where blocking is fine."""
        if len(ref.bodies) > _MEMORY_ONLY_BODIES:
            return None
        token = _memory_only.set(True)
        try:
            return resolve()
        except _NotInMemory:
            return None
        finally:
            _memory_only.reset(token)

    def resolve(self, ref: TranscriptRef) -> list[BaseMessage]:
        """The reference's messages in order, its new bodies and manifest stored."""
        messages = self.messages(ref)
        self.store(ref)
        return messages

    def messages(self, ref: TranscriptRef) -> list[BaseMessage]:
        """The reference's messages in order, checked against its digest. New messages are parsed from the bodies
        it carries and nothing is written, so the model call need not wait for :meth:`store`, which may run beside
        it; the call's result must wait for it, since the next reference names what this one stored."""
        prefix = thread_blob_prefix(ref.thread)
        for message_id, body in ref.bodies.items():
            if sha256_hex(body) != message_id:
                raise TranscriptError(f"message body does not match its id {message_id}")
        ids = self._ids(prefix, ref)
        # The base request's messages, when this process resolved it: only the appended ids are looked up, so a
        # turn's work does not grow with the conversation.
        known = self._resolved.get(self._scope + prefix + ref.base) if ref.base is not None else None
        if known is None or len(known) < ref.keep:
            known, start = [], 0
        else:
            start = ref.keep
        new = (self._message(prefix, message_id, ref.bodies.get(message_id)) for message_id in ids[start:])
        messages = [*known[:start], *new]
        self._resolved.put(self._scope + prefix + ref.digest, messages)
        return list(messages)

    def store(self, ref: TranscriptRef) -> None:
        """Write the new bodies and the manifest of a reference :meth:`messages` accepted (its bodies and digest
        checked there; create-only: a retry writes nothing new)."""
        prefix = thread_blob_prefix(ref.thread)
        # In parallel: the first request of a run on a long thread carries every body (one PUT each on S3). The
        # usual turn carries one or two: handing those to the pool would cost more than the writes.
        writes = [(f"{prefix}msg/{message_id}.json", body) for message_id, body in ref.bodies.items()]
        if len(writes) > 2:
            list(self._writers.map(lambda item: self._write(*item), writes))
        else:
            for key, body in writes:
                self._write(key, body)
        if ref.depth and ref.base is not None:
            delta = delta_text(ref.base, ref.keep, ref.base_depth, ref.append)
            self._write(f"{prefix}manifest/{ref.digest}.delta", delta)
        else:
            self._write(f"{prefix}manifest/{ref.digest}.txt", manifest_text(self._ids(prefix, ref)))

    def _ids(self, prefix: str, ref: TranscriptRef) -> list[str]:
        """The reference's message ids, checked against its digest."""
        cached = self._lists.get(self._scope + prefix + ref.digest)
        if cached is not None:
            return cached
        base = self._manifest(prefix, ref.base, ref.base_depth) if ref.base is not None else []
        if ref.keep > len(base):
            raise TranscriptError(f"reference keeps {ref.keep} messages of a manifest of {len(base)}")
        ids = [*base[: ref.keep], *ref.append]
        if manifest_id(ids) != ref.digest:
            raise TranscriptError(f"the referenced messages do not add up to manifest {ref.digest}")
        self._lists.put(self._scope + prefix + ref.digest, ids)
        return ids

    def preamble(self, ref: TranscriptRef) -> Preamble:
        """The reference's system message and tool schemas (stored first when it carries them). Shared between
        calls: read-only, like the messages."""
        assert ref.preamble is not None
        prefix = thread_blob_prefix(ref.thread)
        key = f"{prefix}preamble/{ref.preamble}.json"
        if ref.preamble_body is not None:
            if sha256_hex(ref.preamble_body) != ref.preamble:
                raise TranscriptError(f"preamble does not match its id {ref.preamble}")
            self._write(key, ref.preamble_body)
        parsed = self._preambles.get(self._scope + key)
        if parsed is None:
            parsed = parse_preamble(self._read(key))
            self._preambles.put(self._scope + key, parsed)
        return parsed

    def _message(self, prefix: str, message_id: str, body: str | None = None) -> BaseMessage:
        """One message, parsed once per process: re-parsing the whole conversation on every turn made a model
        call's cost grow with the thread. ``body``: its text, when the reference carries it (checked against its
        id already). Callers treat the messages as read-only (they are shared)."""
        key = self._scope + prefix + message_id
        message = self._parsed.get(key)
        if message is None:
            text = body if body is not None else self._read(f"{prefix}msg/{message_id}.json")
            (message,) = messages_from_dict([json.loads(text)])
            self._parsed.put(key, message)
        return message

    def _manifest(self, prefix: str, digest: str, depth: int, links: int = 0) -> list[str]:
        """The id list of manifest ``digest``, stored in full (``depth`` 0) or as a delta chained to a full one
        (at most ``FULL_MANIFEST_EVERY`` links as written); every list read is checked against its id."""
        key = self._scope + prefix + digest
        ids = self._lists.get(key)
        if ids is not None:
            return ids
        if depth == 0:
            text = self._read(f"{prefix}manifest/{digest}.txt")
            ids = text.split("\n") if text else []
        else:
            # Content addressing makes a cycle impossible short of a damaged store; the guard turns one into an
            # error instead of a recursion overflow.
            if links > _MAX_LINKS:
                raise TranscriptError(f"delta manifest {digest} does not lead to a full one")
            base, keep, base_depth, append = parse_delta(self._read(f"{prefix}manifest/{digest}.delta", named=False))
            ids = [*self._manifest(prefix, base, base_depth, links + 1)[:keep], *append]
            if manifest_id(ids) != digest:
                raise TranscriptError(f"delta manifest {digest} in {self._store.describe()} does not add up")
        self._lists.put(key, ids)
        return ids

    def _read(self, key: str, *, named: bool = True) -> str:
        """The blob at ``key``; ``named``: its name is its sha256 (a delta's is the list's, checked by the
        caller)."""
        cached = self._cache.get(self._scope + key)
        if cached is not None:
            return cached
        if _memory_only.get():
            raise _NotInMemory(key)
        data = self._store.get(key)
        if data is None:
            raise TranscriptError(f"blob {key} is missing from {self._store.describe()}")
        text = data.decode("utf-8")
        # Keys are content addresses: a blob that does not hash to its name was damaged in the store.
        if named and sha256_hex(text) != posixpath.basename(key).split(".", 1)[0]:
            raise TranscriptError(f"blob {key} in {self._store.describe()} does not match its sha256")
        self._cache.put(self._scope + key, text)
        return text

    def _write(self, key: str, text: str) -> None:
        if self._cache.get(self._scope + key) is not None:
            return  # this process wrote or read it already: it is in the store
        if _memory_only.get():
            raise _NotInMemory(key)
        with contextlib.suppress(ObjectExistsError):
            self._store.put(key, text.encode("utf-8"), if_absent=True)
        self._cache.put(self._scope + key, text)
