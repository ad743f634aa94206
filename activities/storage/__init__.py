"""Object storage for everything a thread owns outside workflow history: the two backends behind one interface.

Keys are ``/``-separated paths relative to the store's root (e.g.
``users/{user}/threads/{thread}/state/v0000000007.json``). The ``filesystem`` backend maps them onto the
hartflow home; the ``s3`` backend onto ``s3://{bucket}/{prefix}{key}``. Both offer the one primitive the
thread store needs to never overwrite newer state silently: a create-only write (``put(..., if_absent=True)``
— an ``O_EXCL`` link on the filesystem, a conditional ``PutObject`` with ``If-None-Match: *`` on S3).

The interface is synchronous: activities that use it are sync activities (run in the worker's thread pool),
and the CLI calls it directly.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from temporalio.exceptions import ApplicationError

OUTAGE_MAX_WAIT_SECONDS = 120.0
"""How long :func:`wait_out_outage` waits for storage to come back before the activity fails."""

T = TypeVar("T")
_log = logging.getLogger(__name__)


class StorageError(Exception):
    """A storage operation failed in a way a retry may fix (network, throttling, a server restart)."""


class StorageConfigError(StorageError):
    """The storage configuration is wrong (bad endpoint, missing bucket, bad credentials); the message names
    the setting to fix. Not retryable."""


class ObjectExistsError(StorageError):
    """A create-only write found the key already present."""


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    modified: datetime
    etag: str
    """Changes whenever the content changes (an MD5 on S3; ``mtime_ns-size`` on the filesystem)."""


class ObjectStore(ABC):
    """A flat key → bytes store. Implementations must be safe to share between threads."""

    backend: str

    @abstractmethod
    def describe(self) -> str:
        """Where the data lives, for messages: ``/path/to/home`` or ``s3://bucket/prefix``."""

    @abstractmethod
    def check(self) -> None:
        """Verify the store is reachable, exists and accepts these credentials (one write, one read, one
        delete of a probe object); raise :class:`StorageConfigError` naming the setting otherwise."""

    @abstractmethod
    def get(self, key: str) -> bytes | None:
        """The object's bytes, or ``None`` when there is no such key."""

    @abstractmethod
    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        """Store ``data`` at ``key`` atomically (readers see the old or the new bytes, never a mix). With
        ``if_absent`` the write only happens if ``key`` does not exist yet; otherwise
        :class:`ObjectExistsError`."""

    @abstractmethod
    def head(self, key: str) -> ObjectInfo | None: ...

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key``; a missing key is not an error."""

    @abstractmethod
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in key order."""

    def delete_prefix(self, prefix: str) -> int:
        """Remove every object under ``prefix``; returns how many were removed."""
        keys = [info.key for info in self.list(prefix)]
        for key in keys:
            self.delete(key)
        return len(keys)

    def exists(self, key: str) -> bool:
        return self.head(key) is not None

    def list_children(self, prefix: str) -> builtins.list[str]:
        """The distinct next path segments below ``prefix`` (which ends with ``/``), sorted: the "folders" and
        "files" directly under it. Backends override this with a cheaper listing."""
        return sorted({info.key[len(prefix) :].split("/", 1)[0] for info in self.list(prefix)})


@contextlib.contextmanager
def activity_errors() -> Iterator[None]:
    """Storage errors as an activity must raise them: a configuration error fails for good (retrying cannot fix
    a wrong bucket or secret); any other :class:`StorageError` propagates as is, so the activity's retry policy
    retries it (an S3 outage, throttling, a network blip)."""
    try:
        yield
    except StorageConfigError as exc:
        raise ApplicationError(str(exc), type="StorageConfigError", non_retryable=True) from exc


def wait_out_outage(
    operation: Callable[[], T],
    *,
    what: str,
    max_wait: float = OUTAGE_MAX_WAIT_SECONDS,
    max_delay: float = 15.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run a blocking storage ``operation``, retrying :class:`StorageError` (never a config error) with backoff
    for up to ``max_wait`` seconds (pausing at most ``max_delay`` between tries), then letting the last error
    through.

    For the places where failing costs more than waiting: after a tool ran (a retried activity
    would run the tool again) and before a model call (a failed attempt spends the model's retry budget). The
    caller heartbeats meanwhile, so a dead worker is still noticed."""
    delay, waited = 1.0, 0.0
    while True:
        try:
            return operation()
        except StorageConfigError:
            raise
        except StorageError as exc:
            if waited + delay > max_wait:
                raise
            _log.warning("%s: storage unavailable (%s); retrying in %.0f s", what, exc, delay)
            sleep(delay)
            waited += delay
            delay = min(delay * 2, max_delay)


def validate_key(key: str) -> str:
    """Keys are relative, ``/``-separated, without empty, ``.`` or ``..`` segments (no escaping the root)."""
    if not key or key.startswith("/") or "\\" in key or "\x00" in key:
        raise ValueError(f"invalid storage key {key!r}")
    if any(part in ("", ".", "..") for part in key.split("/")):
        raise ValueError(f"invalid storage key {key!r}")
    return key
