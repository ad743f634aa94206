"""Thread state storage and the ``thread.load`` / ``thread.commit`` activities.

A commit is a compare-and-swap on a version number: the run passes the version it loaded, and a store whose
version moved on (another run committed meanwhile) refuses with a non-retryable ``ThreadConflict``, so a
commit never silently overwrites newer state. A retried commit (the worker died after writing but before
reporting) recognises its own earlier write by ``(run_id, expected_version)`` and succeeds idempotently.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.paths import ThreadPaths
from workflows.contracts import (
    THREAD_COMMIT,
    THREAD_LOAD,
    ThreadCommitInput,
    ThreadCommitResult,
    ThreadLoadInput,
    ThreadRef,
    ThreadSnapshot,
)
from workflows.state import ThreadState


class ThreadConflictError(Exception):
    """The stored state is newer than the one the commit was based on."""


class ThreadStore(ABC):
    @abstractmethod
    def load(self, thread: ThreadRef) -> ThreadSnapshot: ...

    @abstractmethod
    def commit(self, thread: ThreadRef, state: ThreadState, *, expected_version: int, run_id: str) -> int:
        """Store ``state`` if the stored version is still ``expected_version``; return the new version."""

    @abstractmethod
    def exists(self, thread: ThreadRef) -> bool: ...


class FilesystemThreadStore(ThreadStore):
    """``state.json`` per thread under the hartflow home; atomic replace under an exclusive file lock."""

    def __init__(self, home: Path):
        self.home = Path(home)

    def _paths(self, thread: ThreadRef) -> ThreadPaths:
        return ThreadPaths(self.home, thread.user_id, thread.thread_id)

    def load(self, thread: ThreadRef) -> ThreadSnapshot:
        record = self._read(self._paths(thread).state_file)
        if record is None:
            return ThreadSnapshot(ThreadState(), 0)
        return ThreadSnapshot(ThreadState.model_validate(record["state"]), int(record["version"]))

    def exists(self, thread: ThreadRef) -> bool:
        return self._paths(thread).state_file.exists()

    def commit(self, thread: ThreadRef, state: ThreadState, *, expected_version: int, run_id: str) -> int:
        path = self._paths(thread).state_file
        path.parent.mkdir(parents=True, exist_ok=True)
        commit_id = {"run_id": run_id, "from_version": expected_version}
        with _locked(path.with_suffix(".lock")):
            record = self._read(path)
            stored = int(record["version"]) if record else 0
            if record is not None and stored == expected_version + 1 and record.get("commit") == commit_id:
                return stored
            if stored != expected_version:
                raise ThreadConflictError(
                    f"thread {thread.thread_id} is at version {stored}, but this commit was based on "
                    f"version {expected_version}: another run committed in between"
                )
            new = {
                "version": expected_version + 1,
                "commit": commit_id,
                "committed_at": datetime.now(UTC).isoformat(),
                "state": state.model_dump(mode="json"),
            }
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(new, ensure_ascii=False), encoding="utf-8")
            os.replace(tmp, path)
            return expected_version + 1

    @staticmethod
    def _read(path: Path) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        return data


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class ThreadStoreActivities:
    def __init__(self, store: ThreadStore):
        self.store = store

    @activity.defn(name=THREAD_LOAD)
    def load(self, input: ThreadLoadInput) -> ThreadSnapshot:
        return self.store.load(input.thread)

    @activity.defn(name=THREAD_COMMIT)
    def commit(self, input: ThreadCommitInput) -> ThreadCommitResult:
        try:
            version = self.store.commit(
                input.thread, input.state, expected_version=input.expected_version, run_id=input.run_id
            )
        except ThreadConflictError as exc:
            raise ApplicationError(str(exc), type="ThreadConflict", non_retryable=True) from exc
        return ThreadCommitResult(version)
