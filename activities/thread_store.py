"""Thread state storage and the ``thread.load`` / ``thread.commit`` activities, on either storage backend.

A commit is a compare-and-swap on a version number: the run passes the version it loaded, and a store whose
version moved on (another run committed meanwhile) refuses with a non-retryable ``ThreadConflict``, so a
commit never silently overwrites newer state. A retried commit (the worker died after writing but before
reporting) recognises its own earlier write by ``(run_id, expected_version, state digest)`` and succeeds without
writing again. Only identical content counts as a retry: a *different* commit of the same run on the same base
(a stray copy of the run acting for it) is a conflict too, so nothing a run believes it committed can be
missing from storage.

Layout: each committed version is its own immutable object (``users/{u}/threads/{t}/state/v{N:010d}.json``),
written **create-only** through :meth:`ObjectStore.put` with ``if_absent`` — an ``O_EXCL`` link on the
filesystem, a conditional ``PutObject`` with ``If-None-Match: *`` on S3. Two committers racing from version
N both try to create ``v{N+1}``; the storage lets exactly one succeed, so there is no lock to hold and no
window between "check" and "write". Loading lists the prefix and reads the highest version (S3 listings are
strongly consistent). A thread committed before this layout (``users/{u}/threads/{t}/state.json``) still loads,
and its next commit moves it over.

Versions are kept (``storage.kept_versions``; all by default), because each is a checkpoint a client may rerun or
fork from: a run may load an older version's state (``ThreadLoadInput.base_version``) and commit it on top of the
newest, and each record names its ``lineage`` (``CommitLineage``: the parent version, the run's human message,
the fork's origin), so nothing of the older branch is lost and history shows branches.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from abc import ABC, abstractmethod
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.exceptions import ApplicationError

from activities.contract import implements
from activities.storage import ObjectExistsError, ObjectStore, StorageError, activity_errors
from activities.storage.filesystem import FilesystemObjectStore
from vocabulary.contracts import (
    THREAD_COMMIT,
    THREAD_LOAD,
    CommitLineage,
    ThreadCommitInput,
    ThreadCommitResult,
    ThreadLoadInput,
    ThreadRef,
    ThreadSnapshot,
)
from vocabulary.paths import thread_dir
from vocabulary.state import ThreadState

MIN_KEPT_VERSIONS = 3
"""The fewest versions a thread keeps when pruning is configured: the newest plus two, so a reader that listed
just before a commit still finds its object."""
LEGACY_STATE_OBJECT = "state.json"
_VERSION_OBJECT = re.compile(r"v(\d{10})\.json")
_LOAD_ATTEMPTS = 5
_log = logging.getLogger(__name__)


class ThreadConflictError(Exception):
    """The stored state is newer than the one the commit was based on."""


class VersionMissingError(Exception):
    """A run asked to start from a version the thread does not keep (pruned, or never committed)."""


class ThreadStore(ABC):
    @abstractmethod
    def load(self, thread: ThreadRef, base_version: int | None = None) -> ThreadSnapshot: ...

    @abstractmethod
    def commit(
        self,
        thread: ThreadRef,
        state: ThreadState,
        *,
        expected_version: int,
        run_id: str,
        lineage: CommitLineage | None = None,
    ) -> int:
        """Store ``state`` if the stored version is still ``expected_version``; return the new version."""

    @abstractmethod
    def exists(self, thread: ThreadRef) -> bool: ...


class ObjectThreadStore(ThreadStore):
    """Thread state over an :class:`ObjectStore`: one implementation for every backend."""

    def __init__(self, objects: ObjectStore, kept_versions: int | None = None):
        self.objects = objects
        self.kept_versions = None if kept_versions is None else max(kept_versions, MIN_KEPT_VERSIONS)
        """Versions kept per thread (``storage.kept_versions``); ``None``: every version."""

    @staticmethod
    def thread_prefix(thread: ThreadRef) -> str:
        """Every object the thread owns (state, uploads, outputs, blobs) lives under this key prefix."""
        return f"{thread_dir(thread.user_id, thread.thread_id)}/"

    def _state_prefix(self, thread: ThreadRef) -> str:
        return f"{self.thread_prefix(thread)}state/"

    def _version_key(self, thread: ThreadRef, version: int) -> str:
        return f"{self._state_prefix(thread)}v{version:010d}.json"

    def _legacy_key(self, thread: ThreadRef) -> str:
        return f"{self.thread_prefix(thread)}{LEGACY_STATE_OBJECT}"

    def versions(self, thread: ThreadRef) -> list[int]:
        """The stored versions of the thread, oldest first."""
        prefix = self._state_prefix(thread)
        found = []
        for info in self.objects.list(prefix):
            match = _VERSION_OBJECT.fullmatch(info.key[len(prefix) :])
            if match:
                found.append(int(match.group(1)))
        return sorted(found)

    def record(self, thread: ThreadRef) -> dict[str, Any] | None:
        """The newest committed record (``version``, ``commit``, ``committed_at``, ``state``), or ``None``."""
        for _ in range(_LOAD_ATTEMPTS):
            versions = self.versions(thread)
            if not versions:
                return self._read(self._legacy_key(thread))
            record = self._read(self._version_key(thread, versions[-1]))
            if record is not None:
                return record
            # Pruned (or the thread deleted) between the listing and the read: list again.
        raise StorageError(f"thread {thread.thread_id}: its newest state kept changing while being read")

    def version_record(self, thread: ThreadRef, version: int) -> dict[str, Any] | None:
        """The committed record of one retained version (see :meth:`versions`), or ``None`` once pruned."""
        return self._read(self._version_key(thread, version))

    def load(self, thread: ThreadRef, base_version: int | None = None) -> ThreadSnapshot:
        """The newest state, or ``base_version``'s state with the newest version number (the commit's base)."""
        record = self.record(thread)
        newest = int(record["version"]) if record is not None else 0
        if base_version is not None and base_version != newest:
            record = self.version_record(thread, base_version) if base_version > 0 else {"state": {}}
            if record is None:
                raise VersionMissingError(f"thread {thread.thread_id} does not keep version {base_version}")
        if record is None:
            return ThreadSnapshot(ThreadState(), 0)
        return ThreadSnapshot(ThreadState.model_validate(record["state"]), newest)

    def exists(self, thread: ThreadRef) -> bool:
        return bool(self.versions(thread)) or self.objects.exists(self._legacy_key(thread))

    def commit(
        self,
        thread: ThreadRef,
        state: ThreadState,
        *,
        expected_version: int,
        run_id: str,
        lineage: CommitLineage | None = None,
    ) -> int:
        """Store ``state`` as version ``expected_version + 1`` if that version does not exist yet; return it."""
        state_json = state.model_dump(mode="json")
        commit_id = {"run_id": run_id, "from_version": expected_version, "state_digest": _state_digest(state_json)}
        new_version = expected_version + 1
        versions = self.versions(thread)
        stored = versions[-1] if versions else self._legacy_version(thread)
        if stored != expected_version:
            return self._retried_or_conflict(thread, commit_id, stored)
        record = {
            "version": new_version,
            "commit": commit_id,
            "committed_at": datetime.now(UTC).isoformat(),
            "lineage": asdict(lineage or CommitLineage(parent=expected_version)),
            "state": state_json,
        }
        try:
            self.objects.put(
                self._version_key(thread, new_version),
                json.dumps(record, ensure_ascii=False).encode("utf-8"),
                if_absent=True,
            )
        except ObjectExistsError:
            # Someone created this version first: us (an earlier attempt whose answer was lost) or another run.
            return self._retried_or_conflict(thread, commit_id, max(self.versions(thread), default=new_version))
        self._prune(thread, new_version, migrated=not versions and stored > 0)
        return new_version

    def _retried_or_conflict(self, thread: ThreadRef, commit_id: dict[str, Any], stored: int) -> int:
        new_version = int(commit_id["from_version"]) + 1
        if stored >= new_version:
            existing = self._read(self._version_key(thread, new_version))
            if existing is not None and _same_commit(existing, commit_id):
                return new_version
            if existing is not None and _same_base(existing, commit_id):
                raise ThreadConflictError(
                    f"thread {thread.thread_id}: version {new_version} was already committed by run "
                    f"{commit_id['run_id']} from version {commit_id['from_version']} with other content; "
                    "refusing to take this different commit for a retry of it"
                )
        raise ThreadConflictError(
            f"thread {thread.thread_id} is at version {stored}, but this commit was based on "
            f"version {commit_id['from_version']}: another run committed in between"
        )

    def _legacy_version(self, thread: ThreadRef) -> int:
        record = self._read(self._legacy_key(thread))
        return int(record["version"]) if record else 0

    def _prune(self, thread: ThreadRef, newest: int, *, migrated: bool) -> None:
        """Best effort: a failed prune leaves an old version behind, never loses the new one."""
        if self.kept_versions is None and not migrated:
            return  # every version is kept: nothing to list
        oldest_kept = 0 if self.kept_versions is None else newest - self.kept_versions + 1
        try:
            for version in self.versions(thread):
                if version < oldest_kept:
                    self.objects.delete(self._version_key(thread, version))
            if migrated:
                self.objects.delete(self._legacy_key(thread))
        except StorageError as exc:
            _log.warning("thread %s: old state versions not pruned: %s", thread.thread_id, exc)

    def _read(self, key: str) -> dict[str, Any] | None:
        data = self.objects.get(key)
        if data is None:
            return None
        record: dict[str, Any] = json.loads(data)
        return record


def _state_digest(state_json: Any) -> str:
    """A digest of the state's JSON that does not depend on key order (a stored record is re-read from JSON)."""
    canonical = json.dumps(state_json, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _same_base(record: dict[str, Any], commit_id: dict[str, Any]) -> bool:
    """The stored version was written by the same run from the same base version."""
    written = record.get("commit") or {}
    return bool(
        written.get("run_id") == commit_id["run_id"] and written.get("from_version") == commit_id["from_version"]
    )


def _same_commit(record: dict[str, Any], commit_id: dict[str, Any]) -> bool:
    """The stored version is this very commit: same run, same base, same state (a retry of it). The digest is
    taken from the stored state itself, so records written before digests were kept compare too."""
    return _same_base(record, commit_id) and _state_digest(record.get("state")) == commit_id["state_digest"]


class FilesystemThreadStore(ObjectThreadStore):
    """The thread store on the ``filesystem`` backend rooted at ``home`` (for tools and tests holding a home)."""

    def __init__(self, home: Path):
        super().__init__(FilesystemObjectStore(home))


class ThreadStoreActivities:
    def __init__(self, store: ThreadStore):
        self.store = store

    @implements(THREAD_LOAD)
    def load(self, input: ThreadLoadInput) -> ThreadSnapshot:
        try:
            with activity_errors():
                snapshot = self.store.load(input.thread, input.base_version)
                return ThreadSnapshot(snapshot.state, snapshot.version, input.thread)
        except VersionMissingError as exc:
            raise ApplicationError(str(exc), type="VersionMissing", non_retryable=True) from exc

    @implements(THREAD_COMMIT)
    def commit(self, input: ThreadCommitInput) -> ThreadCommitResult:
        try:
            with activity_errors():
                version = self.store.commit(
                    input.thread,
                    input.state,
                    expected_version=input.expected_version,
                    run_id=input.run_id,
                    lineage=input.lineage,
                )
        except ThreadConflictError as exc:
            raise ApplicationError(str(exc), type="ThreadConflict", non_retryable=True) from exc
        return ThreadCommitResult(version)
