"""A thread's files (``/mnt/user-data/{workspace,uploads,outputs}``) on the configured storage.

Storage keys equal the home-relative layout: ``users/{u}/threads/{t}/user-data/{workspace,uploads,outputs}/…``.

- **filesystem backend** (the store's root is the hartflow home): the keys *are* the sandbox's host folders.
  Nothing is copied; ``pull``/``push`` do nothing and direct reads/writes touch the files in place.
- **any other backend** (S3): every worker keeps a *working copy* of the thread's user-data under its own home,
  which the local sandbox works on. ``pull`` (before a sandbox tool call) downloads what changed in storage
  since this working copy last saw it; ``push`` (after the call, also when it failed) uploads what the call
  created or changed and deletes the objects whose files the call deleted. A per-thread manifest next to the
  working copy (``.user-data-sync.json``) records, per file, the object's etag and the local ``(mtime_ns,
  size)`` at the last sync, so both directions move only what changed — a parallel tool call of the same run
  does not re-push everything. Sync is serialised per thread (two tool calls of one turn run in parallel in
  one worker's thread pool).

Names in ``exclude`` (``storage.sync_exclude``: ``node_modules``, ``.venv``…) stay local to each working copy: a
file under a directory of that name, or of that name itself, is neither pushed nor pulled, and neither side's
deletion touches it — an excluded tree rebuilt on one worker never deletes another worker's copy.

Activities that need one file, not a working copy (upload listings, images, externalised tool output), use
``info``/``read``/``write`` by virtual path, which go straight to storage.

Path safety: a virtual path maps to a key only when it is under one of the three folders without ``.``/``..``
or empty segments; keys listed from storage are held to the same rule before they become local paths, and
no local write follows a symlink out of the thread's user-data. ``push`` never follows symlinks: a link the
model made (``ln -s /etc/passwd``) uploads nothing.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from activities.storage import ObjectInfo, ObjectStore
from activities.storage.filesystem import FilesystemObjectStore
from vocabulary.contracts import ThreadRef
from vocabulary.paths import USER_DATA_DIRS, VIRTUAL_PATH_PREFIX, is_upload_staging_file, thread_dir

logger = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")

MANIFEST_NAME = ".user-data-sync.json"
_TRANSFER_THREADS = 8
_STAGING_SUFFIX = ".sync-tmp"
"""Suffix of this module's own half-written files (a download or a direct write before its rename)."""


class PathEscapeError(ValueError):
    """A virtual path (or a stored key) that would leave the thread's user-data folders."""


@dataclass(frozen=True)
class FileInfo:
    size: int
    is_dir: bool = False


@dataclass(frozen=True)
class SyncReport:
    """What one ``pull`` or ``push`` moved, as user-data-relative paths (``workspace/a.txt``)."""

    transferred: list[str]
    deleted: list[str]


@dataclass
class _Entry:
    etag: str
    mtime_ns: int
    size: int


def user_data_relative(virtual: str) -> str:
    """``/mnt/user-data/outputs/a/b.txt`` → ``outputs/a/b.txt``; :class:`PathEscapeError` for anything that is
    not a file path under workspace, uploads or outputs."""
    if not virtual.startswith(f"{VIRTUAL_PATH_PREFIX}/"):
        raise PathEscapeError(f"Only paths under {VIRTUAL_PATH_PREFIX}/ are allowed: {virtual}")
    return _checked_relative(virtual[len(VIRTUAL_PATH_PREFIX) + 1 :])


def _checked_relative(relative: str) -> str:
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts) or "\0" in relative or "\\" in relative:
        raise PathEscapeError("Access denied: path traversal detected")
    if parts[0] not in USER_DATA_DIRS or len(parts) < 2:
        dirs = ", ".join(f"{VIRTUAL_PATH_PREFIX}/{d}" for d in USER_DATA_DIRS)
        raise PathEscapeError(f"Only files under {dirs} are allowed: {VIRTUAL_PATH_PREFIX}/{relative}")
    return relative


class ThreadFiles:
    """A thread's user-data on ``store``, with this worker's working copies under ``home``."""

    def __init__(self, store: ObjectStore, home: Path, *, exclude: frozenset[str] = frozenset()) -> None:
        self.store = store
        self.home = Path(home)
        self.exclude = exclude
        # Only a filesystem store rooted at the home shares the sandbox's folders; any other store (S3, or a
        # filesystem store elsewhere) needs a working copy.
        self.uses_working_copy = not (
            isinstance(store, FilesystemObjectStore) and os.path.realpath(store.root) == os.path.realpath(home)
        )
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_guard = threading.Lock()

    @classmethod
    def on_disk(cls, home: Path) -> ThreadFiles:
        """The filesystem backend: the thread files are the folders under ``home``."""
        return cls(FilesystemObjectStore(home), home)

    # -- layout --------------------------------------------------------------------------------------------

    @staticmethod
    def prefix(thread: ThreadRef) -> str:
        return f"{thread_dir(thread.user_id, thread.thread_id)}/user-data/"

    def key(self, thread: ThreadRef, virtual: str) -> str:
        """The storage key (= the home-relative path) of a virtual path."""
        return self.prefix(thread) + user_data_relative(virtual)

    def _user_data(self, thread: ThreadRef) -> Path:
        return self.home / self.prefix(thread)

    def _local(self, thread: ThreadRef, relative: str) -> Path:
        """The local file for a checked user-data-relative path; refuses one that symlinks (itself or through
        a parent) out of the thread's three folders."""
        user_data = self._user_data(thread)
        target = user_data / relative
        resolved = Path(os.path.realpath(target))
        if not any(resolved.is_relative_to(os.path.realpath(user_data / name)) for name in USER_DATA_DIRS):
            raise PathEscapeError("Access denied: path traversal detected")
        return target

    # -- direct access by virtual path --------------------------------------------------------------------

    def info(self, thread: ThreadRef, virtual: str) -> FileInfo | None:
        """Size of the file at ``virtual``; ``is_dir`` when it names a folder; ``None`` when nothing is there."""
        relative = user_data_relative(virtual)
        if not self.uses_working_copy:
            path = self._local(thread, relative)
            if path.is_dir():
                return FileInfo(0, is_dir=True)
            return FileInfo(path.stat().st_size) if path.is_file() else None
        key = self.prefix(thread) + relative
        if (found := self.store.head(key)) is not None:
            return FileInfo(found.size)
        is_dir = next(iter(self.store.list(key + "/")), None) is not None
        return FileInfo(0, is_dir=True) if is_dir else None

    def read(self, thread: ThreadRef, virtual: str) -> bytes | None:
        """The file's bytes, or ``None`` when there is no file at ``virtual``."""
        relative = user_data_relative(virtual)
        if not self.uses_working_copy:
            try:
                return self._local(thread, relative).read_bytes()
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                return None
        return self.store.get(self.prefix(thread) + relative)

    def write(self, thread: ThreadRef, virtual: str, data: bytes) -> None:
        """Store a file atomically. This worker's working copy (if it has one) gets it too, recorded as in sync,
        so its next ``pull`` does not download what it just wrote."""
        relative = user_data_relative(virtual)
        if not self.uses_working_copy:
            _write_atomically(self._local(thread, relative), data)
            return
        key = self.prefix(thread) + relative
        with self._lock(thread):
            # No working copy on this worker: the next pull fetches the file when one is made.
            local = self._local(thread, relative) if self._user_data(thread).is_dir() else None
            self.store.put(key, data)
            if local is None:
                return
            _write_atomically(local, data)
            manifest = self._load_manifest(thread)
            manifest[relative] = self._entry(key, local.stat())
            self._save_manifest(thread, manifest)

    # -- the working copy ---------------------------------------------------------------------------------

    def pull(self, thread: ThreadRef) -> SyncReport:
        """Bring this worker's working copy up to date with storage (new, changed and deleted objects)."""
        if not self.uses_working_copy:
            return SyncReport([], [])
        prefix = self.prefix(thread)
        with self._lock(thread):
            manifest = self._load_manifest(thread)
            remote: dict[str, ObjectInfo] = {}
            for found in self.store.list(prefix):
                relative = found.key[len(prefix) :]
                try:
                    checked = _checked_relative(relative)
                except PathEscapeError:
                    logger.warning("ignoring stored object %s: not a thread file path", found.key)
                    continue
                if not self._excluded(checked):
                    remote[checked] = found
            stale = [
                (relative, found)
                for relative, found in remote.items()
                if (entry := manifest.get(relative)) is None or entry.etag != found.etag
            ]
            fetched: list[str] = []
            deleted: list[str] = []
            for (relative, _), downloaded in zip(
                stale, _in_parallel(lambda item: self._download(thread, *item), stale), strict=True
            ):
                if downloaded is not None:
                    manifest[relative] = downloaded
                    fetched.append(relative)
            for relative in [r for r in manifest if r not in remote and not self._excluded(r)]:
                entry = manifest.pop(relative)
                local = self._user_data(thread) / relative
                # Deleted in storage by another worker. A local edit not pushed yet wins: push re-creates it.
                if _unchanged(local, entry):
                    local.unlink()
                    deleted.append(relative)
            self._save_manifest(thread, manifest)
        return SyncReport(fetched, deleted)

    def push(self, thread: ThreadRef) -> SyncReport:
        """Upload the files created or changed in the working copy since the last sync; delete the objects
        whose files were deleted here (unless someone changed the object meanwhile)."""
        if not self.uses_working_copy:
            return SyncReport([], [])
        prefix, user_data = self.prefix(thread), self._user_data(thread)
        with self._lock(thread):
            manifest = self._load_manifest(thread)
            uploaded: list[str] = []
            deleted: list[str] = []
            present: set[str] = set()
            changed: list[tuple[Path, str, os.stat_result]] = []
            for path, relative in _working_files(user_data, self.exclude):
                try:
                    stat = path.lstat()
                except FileNotFoundError:
                    continue  # deleted while we walked: treated as deleted below
                present.add(relative)
                entry = manifest.get(relative)
                if entry is None or (entry.mtime_ns, entry.size) != _mtime_size(stat):
                    changed.append((path, relative, stat))
            for (_, relative, _), sent in zip(
                changed, _in_parallel(lambda item: self._upload(prefix, *item), changed), strict=True
            ):
                if sent is None:
                    present.discard(relative)  # deleted while we walked: treated as deleted below
                else:
                    manifest[relative] = sent
                    uploaded.append(relative)
            for relative in [r for r in manifest if r not in present and not self._excluded(r)]:
                entry = manifest.pop(relative)
                stored = self.store.head(prefix + relative)
                if stored is not None and stored.etag == entry.etag:
                    self.store.delete(prefix + relative)
                    deleted.append(relative)
            self._save_manifest(thread, manifest)
        return SyncReport(uploaded, deleted)

    # -- helpers ------------------------------------------------------------------------------------------

    def _excluded(self, relative: str) -> bool:
        return bool(self.exclude) and not self.exclude.isdisjoint(relative.split("/"))

    def _download(self, thread: ThreadRef, relative: str, found: ObjectInfo) -> _Entry | None:
        data = self.store.get(found.key)
        if data is None:
            return None  # deleted since the listing
        try:
            local = self._local(thread, relative)
        except PathEscapeError:
            logger.warning("not pulling %s: a local symlink leads out of the thread's folder", found.key)
            return None
        _write_atomically(local, data)
        return _Entry(found.etag, *_mtime_size(local.stat()))

    def _upload(self, prefix: str, path: Path, relative: str, stat: os.stat_result) -> _Entry | None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        key = prefix + relative
        self.store.put(key, data)
        # The stat from before the read: a file still being written shows as changed next time.
        return self._entry(key, stat)

    def _entry(self, key: str, stat: os.stat_result) -> _Entry:
        stored = self.store.head(key)
        return _Entry(stored.etag if stored is not None else "", *_mtime_size(stat))

    def _lock(self, thread: ThreadRef) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault((thread.user_id, thread.thread_id), threading.Lock())

    def _manifest_path(self, thread: ThreadRef) -> Path:
        return self.home / thread_dir(thread.user_id, thread.thread_id) / MANIFEST_NAME

    def _load_manifest(self, thread: ThreadRef) -> dict[str, _Entry]:
        try:
            raw = json.loads(self._manifest_path(thread).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            # A damaged manifest costs a full re-download, never wrong data: every object looks changed.
            logger.warning("ignoring unreadable sync manifest %s", self._manifest_path(thread), exc_info=True)
            return {}
        return {relative: _Entry(**entry) for relative, entry in raw.get("files", {}).items()}

    def _save_manifest(self, thread: ThreadRef, manifest: dict[str, _Entry]) -> None:
        files = {relative: vars(entry) for relative, entry in sorted(manifest.items())}
        _write_atomically(self._manifest_path(thread), json.dumps({"files": files}).encode())


def _in_parallel(work: Callable[[T], R], items: list[T]) -> list[R]:
    """``[work(item) for item in items]``, several at a time: each transfer is one request's latency."""
    if len(items) < 2:
        return [work(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(_TRANSFER_THREADS, len(items))) as pool:
        return list(pool.map(work, items))


def _mtime_size(stat: os.stat_result) -> tuple[int, int]:
    return stat.st_mtime_ns, stat.st_size


def _unchanged(path: Path, entry: _Entry) -> bool:
    try:
        stat = path.lstat()
    except FileNotFoundError:
        return False
    return (entry.mtime_ns, entry.size) == _mtime_size(stat)


def _working_files(user_data: Path, exclude: frozenset[str]) -> list[tuple[Path, str]]:
    """Regular files of the working copy as ``(path, user-data-relative path)``, outside excluded names (whose
    trees are not even walked); symlinks are never followed or uploaded, and neither are half-written files
    (an upload's staging file, a download in progress)."""
    found = []
    for top in USER_DATA_DIRS:
        for current, dirs, files in os.walk(user_data / top):  # os.walk does not descend into symlinked dirs
            dirs[:] = [name for name in dirs if name not in exclude]
            for name in files:
                if name in exclude:
                    continue
                path = Path(current) / name
                if is_upload_staging_file(name) or name.endswith(_STAGING_SUFFIX) or not path.is_file():
                    continue
                if path.is_symlink():
                    continue
                relative = path.relative_to(user_data).as_posix()
                try:
                    found.append((path, _checked_relative(relative)))
                except PathEscapeError:
                    logger.warning("not pushing %s: the name cannot be a storage key", relative)
    return found


def _write_atomically(target: Path, data: bytes) -> None:
    """Write aside and rename, so a reader (or a sandbox command) never sees half a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.{uuid.uuid4().hex}{_STAGING_SUFFIX}")
    try:
        staging.write_bytes(data)
        os.replace(staging, target)
    finally:
        staging.unlink(missing_ok=True)
