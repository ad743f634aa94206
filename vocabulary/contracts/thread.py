"""Thread storage: load and commit a thread's state (``activities/thread_store.py``) and create its user-data
folders (``activities/thread_data.py``). :class:`ThreadRef` names a thread in every other contract too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vocabulary.activity_ref import ActivityRef
from vocabulary.state import ThreadState


@dataclass
class ThreadRef:
    user_id: str
    thread_id: str


@dataclass
class ThreadLoadInput:
    thread: ThreadRef
    base_version: int | None = None
    """Start from this committed version's state instead of the newest (0: the empty state before any commit);
    the snapshot's ``version`` is still the newest, the next commit's precondition."""


@dataclass
class ThreadSnapshot:
    state: ThreadState
    version: int
    """The store's version of this state; 0 for a thread that has never been committed."""
    thread: ThreadRef | None = None
    """The thread read: the load is a local activity, whose input is not in history; its result is, and names it."""


@dataclass
class CommitLineage:
    """Where a committed version's state comes from, kept in its record so history can show branches
    (``workers/api/checkpoints.py``)."""

    parent: int
    """The version this state grew from (0: the empty state before the thread's first commit)."""
    message_id: str | None = None
    """The run's human message: the version's input checkpoint is the parent's state plus this message."""
    input_of: int | None = None
    """A rerun of another version's input (regenerate): that version's input checkpoint is this one's parent too."""
    source: Literal["loop", "update", "fork"] = "loop"
    """A run (``loop``), ``POST /threads/{id}/state`` (``update``), a branch or copy of another thread (``fork``)."""
    forked_from: dict[str, str] | None = None
    """A fork's origin: ``{thread_id, checkpoint_id}``."""


@dataclass
class ThreadCommitInput:
    thread: ThreadRef
    state: ThreadState
    expected_version: int
    run_id: str
    lineage: CommitLineage | None = None
    """Where the state comes from; ``None``: it grew from ``expected_version`` (a run's later commits)."""


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
