"""Thread storage: load and commit a thread's state (``activities/thread_store.py``) and create its user-data
folders (``activities/thread_data.py``). :class:`ThreadRef` names a thread in every other contract too."""

from __future__ import annotations

from dataclasses import dataclass

from vocabulary.activity_ref import ActivityRef
from vocabulary.state import ThreadState


@dataclass
class ThreadRef:
    user_id: str
    thread_id: str


@dataclass
class ThreadLoadInput:
    thread: ThreadRef


@dataclass
class ThreadSnapshot:
    state: ThreadState
    version: int
    """The store's version of this state; 0 for a thread that has never been committed."""


@dataclass
class ThreadCommitInput:
    thread: ThreadRef
    state: ThreadState
    expected_version: int
    run_id: str


@dataclass
class ThreadCommitResult:
    version: int


@dataclass
class ThreadDirsInput:
    thread: ThreadRef


@dataclass
class ThreadDirsResult:
    created: list[str]
    """The user-data folders, relative to the storage home."""


THREAD_LOAD = ActivityRef("thread.load", ThreadLoadInput, ThreadSnapshot)
THREAD_COMMIT = ActivityRef("thread.commit", ThreadCommitInput, ThreadCommitResult)
THREAD_ENSURE_DIRS = ActivityRef("thread.ensure_dirs", ThreadDirsInput, ThreadDirsResult)
