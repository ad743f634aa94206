"""Syncing a working copy of a thread's user-data with storage: ``pull`` and ``push``, one algorithm for every copy.

A working copy is this worker's folders (``activities/user_data_tree.py``) or a sandbox pod's ``/mnt/user-data``
(``activities/sandbox/pod_files.py``); it only lists, reads, writes and deletes files (:class:`WorkingCopy`).
``ThreadFiles`` (``activities/thread_files.py``) decides when a copy syncs and holds the thread's lock around
each call here.

``pull`` downloads what changed in storage since the copy last saw it and deletes the files whose objects were
deleted; ``push`` uploads what the copy created or changed and deletes the objects whose files it deleted. A
manifest kept with the copy (``.user-data-sync.json``) records, per file, the object's etag and the local
``(mtime_ns, size)`` at the last sync, so both directions move only what changed — a parallel tool call of the
same run does not re-push everything.

Names in ``exclude`` (``storage.sync_exclude``: ``node_modules``, ``.venv``…) stay local to each working copy: a
file under a directory of that name, or of that name itself, is neither pushed nor pulled, and neither side's
deletion touches it — an excluded tree rebuilt on one worker never deletes another worker's copy.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, TypeVar

from activities.storage import ObjectInfo, ObjectStore
from activities.user_data_tree import MtimeSize, PathEscapeError, checked_relative, is_excluded

logger = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")

MANIFEST_NAME = ".user-data-sync.json"
_TRANSFER_THREADS = 8


class WorkingCopy(Protocol):
    """Where a sandbox sees the thread's files: this worker's folders (``UserDataTree``) or a pod's
    (``activities/sandbox/pod_files.py``). ``pull``/``push`` diff it against storage through these calls."""

    def files(self, exclude: frozenset[str]) -> dict[str, MtimeSize]: ...

    def read(self, relative: str) -> bytes | None: ...

    def write(self, relative: str, data: bytes) -> MtimeSize: ...

    def delete_if_unchanged(self, relative: str, expected: MtimeSize) -> bool: ...

    def load_manifest(self) -> bytes | None: ...

    def save_manifest(self, data: bytes) -> None: ...


@dataclass(frozen=True)
class SyncReport:
    """What one ``pull`` or ``push`` moved, as user-data-relative paths (``workspace/a.txt``)."""

    transferred: list[str]
    deleted: list[str]


@dataclass
class _Entry:
    """A file as of the last sync: the object's etag and the copy's ``(mtime_ns, size)``."""

    etag: str
    mtime_ns: int
    size: int


def pull(store: ObjectStore, prefix: str, copy: WorkingCopy, exclude: frozenset[str]) -> SyncReport:
    """Bring ``copy`` up to date with the objects under ``prefix``: new, changed and deleted objects."""
    manifest = _load_manifest(copy)
    remote: dict[str, ObjectInfo] = {}
    for found in store.list(prefix):
        relative = found.key[len(prefix) :]
        try:
            checked = checked_relative(relative)
        except PathEscapeError:
            logger.warning("ignoring stored object %s: not a thread file path", found.key)
            continue
        if not is_excluded(checked, exclude):
            remote[checked] = found
    stale = [
        (relative, found)
        for relative, found in remote.items()
        if (entry := manifest.get(relative)) is None or entry.etag != found.etag
    ]
    fetched: list[str] = []
    deleted: list[str] = []
    for (relative, _), downloaded in zip(
        stale, _in_parallel(lambda item: _download(store, copy, *item), stale), strict=True
    ):
        if downloaded is not None:
            manifest[relative] = downloaded
            fetched.append(relative)
    for relative in [r for r in manifest if r not in remote and not is_excluded(r, exclude)]:
        entry = manifest.pop(relative)
        # Deleted in storage by another worker. A local edit not pushed yet wins: push re-creates it.
        if copy.delete_if_unchanged(relative, (entry.mtime_ns, entry.size)):
            deleted.append(relative)
    _save_manifest(copy, manifest)
    return SyncReport(fetched, deleted)


def push(store: ObjectStore, prefix: str, copy: WorkingCopy, exclude: frozenset[str]) -> SyncReport:
    """Upload the files created or changed in ``copy`` since the last sync; delete the objects whose files were
    deleted there (unless someone changed the object meanwhile)."""
    manifest = _load_manifest(copy)
    uploaded: list[str] = []
    deleted: list[str] = []
    present = copy.files(exclude)
    changed = [
        (relative, seen)
        for relative, seen in present.items()
        if (entry := manifest.get(relative)) is None or (entry.mtime_ns, entry.size) != seen
    ]
    for (relative, _), sent in zip(
        changed, _in_parallel(lambda item: _upload(store, copy, prefix, *item), changed), strict=True
    ):
        if sent is None:
            present.pop(relative)  # deleted since the listing: treated as deleted below
        else:
            manifest[relative] = sent
            uploaded.append(relative)
    for relative in [r for r in manifest if r not in present and not is_excluded(r, exclude)]:
        entry = manifest.pop(relative)
        stored = store.head(prefix + relative)
        if stored is not None and stored.etag == entry.etag:
            store.delete(prefix + relative)
            deleted.append(relative)
    _save_manifest(copy, manifest)
    return SyncReport(uploaded, deleted)


def record_in_sync(store: ObjectStore, key: str, copy: WorkingCopy, relative: str, written: MtimeSize) -> None:
    """Note in ``copy``'s manifest that its file ``relative``, as ``written``, is the object at ``key``: the file
    was stored and written to the copy alike, so the next sync moves it in neither direction."""
    manifest = _load_manifest(copy)
    manifest[relative] = _entry(store, key, written)
    _save_manifest(copy, manifest)


def _download(store: ObjectStore, copy: WorkingCopy, relative: str, found: ObjectInfo) -> _Entry | None:
    data = store.get(found.key)
    if data is None:
        return None  # deleted since the listing
    try:
        written = copy.write(relative, data)
    except PathEscapeError:
        logger.warning("not pulling %s: a symlink there leads out of the thread's folder", found.key)
        return None
    return _Entry(found.etag, *written)


def _upload(store: ObjectStore, copy: WorkingCopy, prefix: str, relative: str, seen: MtimeSize) -> _Entry | None:
    try:
        data = copy.read(relative)
    except PathEscapeError:
        logger.warning("not pushing %s: no longer a regular file in the thread's folder", relative)
        return None
    if data is None:
        return None
    key = prefix + relative
    store.put(key, data)
    # The (mtime, size) from before the read: a file still being written shows as changed next time.
    return _entry(store, key, seen)


def _entry(store: ObjectStore, key: str, seen: MtimeSize) -> _Entry:
    stored = store.head(key)
    return _Entry(stored.etag if stored is not None else "", *seen)


def _load_manifest(copy: WorkingCopy) -> dict[str, _Entry]:
    raw = copy.load_manifest()
    if raw is None:
        return {}
    try:
        files = json.loads(raw)["files"]
        return {relative: _Entry(**entry) for relative, entry in files.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        # A damaged manifest costs a full re-download, never wrong data: every object looks changed.
        logger.warning("ignoring an unreadable sync manifest", exc_info=True)
        return {}


def _save_manifest(copy: WorkingCopy, manifest: dict[str, _Entry]) -> None:
    files = {relative: vars(entry) for relative, entry in sorted(manifest.items())}
    copy.save_manifest(json.dumps({"files": files}).encode())


def _in_parallel(work: Callable[[T], R], items: list[T]) -> list[R]:
    """``[work(item) for item in items]``, several at a time: each transfer is one request's latency."""
    if len(items) < 2:
        return [work(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(_TRANSFER_THREADS, len(items))) as pool:
        return list(pool.map(work, items))
