"""The thread's message blobs: resolve a model request's :class:`TranscriptRef` into its messages.

Layout (on the configured object store, beside the thread's state):

    users/{user}/threads/{thread}/blobs/msg/{sha256}.json        one message, canonical JSON
    users/{user}/threads/{thread}/blobs/manifest/{sha256}.txt    one request's message ids, one per line

Both are content-addressed and written create-only, so a retried or duplicated activity writes the same bytes
or nothing. A bounded in-process LRU cache keeps recent blobs, so the usual turn — the same worker as the last
one — reads nothing and writes only the new messages and the new manifest. Every body and the resulting list
are checked against their ids: a reference that does not add up fails the call instead of sending the model a
different conversation.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

from langchain_core.messages import BaseMessage, messages_from_dict

from activities.storage import ObjectExistsError, ObjectStore
from vocabulary.contracts import ThreadRef, TranscriptRef
from vocabulary.transcript import manifest_id, manifest_text, sha256_hex

__all__ = ["TranscriptError", "TranscriptStore", "thread_blob_prefix"]

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
_PARSED_MESSAGES = 20_000
_WRITERS = 16

V = TypeVar("V")


class TranscriptError(Exception):
    """A reference names a blob the store does not have, or does not match its digest."""


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
    """Blob reads and writes for :class:`TranscriptRef` (sync: the model activity runs it in a thread)."""

    def __init__(self, store: ObjectStore, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self._store = store
        self._cache: _Lru[str] = _Lru(cache_bytes, len)
        self._parsed: _Lru[BaseMessage] = _Lru(_PARSED_MESSAGES, lambda _: 1)
        # Cache keys name the store, so two stores in one process (tests, two homes) never share entries.
        self._scope = store.describe() + "|"
        # Long-lived threads, so the S3 store's per-thread clients are built once, not per request.
        self._writers = ThreadPoolExecutor(max_workers=_WRITERS, thread_name_prefix="transcript-writer")

    def resolve(self, ref: TranscriptRef) -> list[BaseMessage]:
        """Store the reference's new bodies and manifest, then return its messages in order."""
        prefix = thread_blob_prefix(ref.thread)
        for message_id, body in ref.bodies.items():
            if sha256_hex(body) != message_id:
                raise TranscriptError(f"message body does not match its id {message_id}")
        # In parallel: the first request of a run on a long thread carries every body (one PUT each on S3).
        list(self._writers.map(lambda item: self._write(f"{prefix}msg/{item[0]}.json", item[1]), ref.bodies.items()))
        base = self._manifest(prefix, ref.base) if ref.base is not None else []
        if ref.keep > len(base):
            raise TranscriptError(f"reference keeps {ref.keep} messages of a manifest of {len(base)}")
        ids = [*base[: ref.keep], *ref.append]
        if manifest_id(ids) != ref.digest:
            raise TranscriptError(f"the referenced messages do not add up to manifest {ref.digest}")
        self._write(f"{prefix}manifest/{ref.digest}.txt", manifest_text(ids))
        return [self._message(prefix, message_id) for message_id in ids]

    def _message(self, prefix: str, message_id: str) -> BaseMessage:
        """One message, parsed once per process: re-parsing the whole conversation on every turn made a model
        call's cost grow with the thread. Callers treat the messages as read-only (they are shared)."""
        key = self._scope + prefix + message_id
        message = self._parsed.get(key)
        if message is None:
            (message,) = messages_from_dict([json.loads(self._read(f"{prefix}msg/{message_id}.json"))])
            self._parsed.put(key, message)
        return message

    def _manifest(self, prefix: str, digest: str) -> list[str]:
        text = self._read(f"{prefix}manifest/{digest}.txt")
        return text.split("\n") if text else []

    def _read(self, key: str) -> str:
        cached = self._cache.get(self._scope + key)
        if cached is not None:
            return cached
        data = self._store.get(key)
        if data is None:
            raise TranscriptError(f"blob {key} is missing from {self._store.describe()}")
        text = data.decode("utf-8")
        # Keys are content addresses: a blob that does not hash to its name was damaged in the store.
        if sha256_hex(text) != posixpath.basename(key).split(".", 1)[0]:
            raise TranscriptError(f"blob {key} in {self._store.describe()} does not match its sha256")
        self._cache.put(self._scope + key, text)
        return text

    def _write(self, key: str, text: str) -> None:
        if self._cache.get(self._scope + key) is not None:
            return  # this process wrote or read it already: it is in the store
        with contextlib.suppress(ObjectExistsError):
            self._store.put(key, text.encode("utf-8"), if_absent=True)
        self._cache.put(self._scope + key, text)
