"""A thread's files (``/mnt/user-data/{workspace,uploads,outputs}``) on the configured storage.

Storage keys equal the home-relative layout: ``users/{u}/threads/{t}/user-data/{workspace,uploads,outputs}/…``.

- **filesystem backend** (the store's root is the hartflow home): the keys *are* the sandbox's host folders.
  Nothing is copied; ``pull``/``push`` do nothing and direct reads/writes touch the files in place.
- **any other backend** (S3): every worker keeps a *working copy* of the thread's user-data under its own home,
  which the local sandbox works on. ``pull`` (before a sandbox tool call) downloads what changed in storage
  since this working copy last saw it; ``push`` (after the call, also when it failed) uploads what the call
  created or changed and deletes the objects whose files the call deleted (``activities/thread_file_sync.py``,
  with a manifest next to the working copy, so both directions move only what changed). Sync is serialised
  per thread (two tool calls of one turn run in parallel in one worker's thread pool).
- **a sandbox pod** (Kubernetes, on either backend) holds a copy of its own in its ``/mnt/user-data``:
  ``pull``/``push`` take it as a ``WorkingCopy`` reached through the sandbox server
  (``activities/sandbox/pod_files.py``), with the manifest kept in the pod, so whichever worker adopts the pod
  continues its sync. One algorithm for both (``activities/thread_file_sync.py``); the copy only lists, reads,
  writes and deletes files (``activities/user_data_tree.py``).

Activities that need one file, not a working copy (upload listings, images, externalised tool output), use
``info``/``read``/``write`` by virtual path, which go straight to storage.

Path safety: a virtual path maps to a key only when it is under one of the three folders without ``.``/``..``
or empty segments; keys listed from storage are held to the same rule before they become local paths. No
local read, write, listing or deletion follows a symlink anywhere below the home (``activities/no_follow.py``):
a link the model made (``ln -s /etc/passwd``, ``outputs -> /``, a linked ``user-data``) is refused when named,
uploads nothing on ``push`` and receives nothing on ``pull``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISDIR, S_ISLNK, S_ISREG

from activities import thread_file_sync
from activities.storage import ObjectStore
from activities.storage.filesystem import FilesystemObjectStore
from activities.thread_file_sync import MANIFEST_NAME, SyncReport, WorkingCopy
from activities.user_data_tree import STAGING_SUFFIX, PathEscapeError, UserDataTree, checked_relative
from vocabulary.contracts import ThreadRef
from vocabulary.paths import VIRTUAL_PATH_PREFIX, is_upload_staging_file, thread_dir

__all__ = ["FileInfo", "PathEscapeError", "ThreadFiles", "user_data_relative"]


@dataclass(frozen=True)
class FileInfo:
    size: int
    is_dir: bool = False


def user_data_relative(virtual: str) -> str:
    """``/mnt/user-data/outputs/a/b.txt`` → ``outputs/a/b.txt``; :class:`PathEscapeError` for anything that is
    not a file path under workspace, uploads or outputs."""
    if not virtual.startswith(f"{VIRTUAL_PATH_PREFIX}/"):
        raise PathEscapeError(f"Only paths under {VIRTUAL_PATH_PREFIX}/ are allowed: {virtual}")
    return checked_relative(virtual[len(VIRTUAL_PATH_PREFIX) + 1 :])


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

    def working_copy(self, thread: ThreadRef) -> UserDataTree:
        """This worker's copy of the thread's folders (the store's own files on the filesystem backend)."""
        manifest = self.home / thread_dir(thread.user_id, thread.thread_id) / MANIFEST_NAME
        return UserDataTree(self._user_data(thread), manifest, anchor=self.home)

    # -- direct access by virtual path --------------------------------------------------------------------

    def info(self, thread: ThreadRef, virtual: str) -> FileInfo | None:
        """Size of the file at ``virtual``; ``is_dir`` when it names a folder; ``None`` when nothing is there;
        :class:`PathEscapeError` when it (or a folder on the way) is a symlink."""
        relative = user_data_relative(virtual)
        if not self.uses_working_copy:
            here = self.working_copy(thread).stat(relative)  # never followed
            if here is not None and S_ISLNK(here.st_mode):
                raise PathEscapeError("Access denied: path traversal detected")
            if here is None or not (S_ISDIR(here.st_mode) or S_ISREG(here.st_mode)):
                return None
            return FileInfo(0, is_dir=True) if S_ISDIR(here.st_mode) else FileInfo(here.st_size)
        key = self.prefix(thread) + relative
        if (found := self.store.head(key)) is not None:
            return FileInfo(found.size)
        is_dir = next(iter(self.store.list(key + "/")), None) is not None
        return FileInfo(0, is_dir=True) if is_dir else None

    def read(self, thread: ThreadRef, virtual: str) -> bytes | None:
        """The file's bytes, or ``None`` when there is no file at ``virtual``."""
        relative = user_data_relative(virtual)
        if not self.uses_working_copy:
            return self.working_copy(thread).read(relative)
        return self.store.get(self.prefix(thread) + relative)

    def write(self, thread: ThreadRef, virtual: str, data: bytes) -> None:
        """Store a file atomically. This worker's working copy (if it has one) gets it too, recorded as in sync,
        so its next ``pull`` does not download what it just wrote."""
        relative = user_data_relative(virtual)
        copy = self.working_copy(thread)
        if not self.uses_working_copy:
            copy.write(relative, data)
            return
        key = self.prefix(thread) + relative
        with self._lock(thread):
            # No working copy on this worker: the next pull fetches the file when one is made.
            has_copy = self._user_data(thread).is_dir()
            if has_copy:
                copy.refuse_links(relative)  # refuse a symlinked path before anything is stored
            self.store.put(key, data)
            if not has_copy:
                return
            written = copy.write(relative, data)
            thread_file_sync.record_in_sync(self.store, key, copy, relative, written)

    def listing(self, thread: ThreadRef, folder: str) -> list[tuple[str, int]]:
        """``(virtual path, size)`` of every file under ``folder`` (``outputs``: a run's artifacts) in storage,
        sorted; keys held to a pull's rules, half-written files left out."""
        prefix = self.prefix(thread)
        found = []
        for info in self.store.list(f"{prefix}{folder}/"):
            relative = info.key[len(prefix) :]
            name = relative.rsplit("/", 1)[-1]
            if name.endswith(STAGING_SUFFIX) or is_upload_staging_file(name):
                continue
            try:
                found.append((f"{VIRTUAL_PATH_PREFIX}/{checked_relative(relative)}", info.size))
            except PathEscapeError:
                continue
        return sorted(found)

    # -- the working copy ---------------------------------------------------------------------------------

    def syncs(self, copy: WorkingCopy | None) -> bool:
        """Whether ``pull``/``push`` of ``copy`` move anything: a pod always holds a copy of its own; this
        worker's folders only when they are not the store's own files."""
        return copy is not None or self.uses_working_copy

    def pull(self, thread: ThreadRef, copy: WorkingCopy | None = None) -> SyncReport:
        """Bring ``copy`` (default: this worker's working copy) up to date with storage: new, changed and
        deleted objects."""
        if not self.syncs(copy):
            return SyncReport([], [])
        copy = copy if copy is not None else self.working_copy(thread)
        with self._lock(thread):
            return thread_file_sync.pull(self.store, self.prefix(thread), copy, self.exclude)

    def push(self, thread: ThreadRef, copy: WorkingCopy | None = None) -> SyncReport:
        """Upload the files created or changed in ``copy`` (default: this worker's working copy) since the last
        sync; delete the objects whose files were deleted there (unless someone changed the object meanwhile)."""
        if not self.syncs(copy):
            return SyncReport([], [])
        copy = copy if copy is not None else self.working_copy(thread)
        with self._lock(thread):
            return thread_file_sync.push(self.store, self.prefix(thread), copy, self.exclude)

    # -- helpers ------------------------------------------------------------------------------------------

    def _lock(self, thread: ThreadRef) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault((thread.user_id, thread.thread_id), threading.Lock())
