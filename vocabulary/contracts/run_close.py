"""A run's end in one activity: its final commit, then its archive (``activities/run_close.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from vocabulary.activity_ref import ActivityRef
from vocabulary.contracts.run_archive import RunArchiveInput
from vocabulary.contracts.thread import ThreadCommitInput


@dataclass
class RunCloseInput:
    commit: ThreadCommitInput | None
    """The run's final commit; ``None`` for a run that commits nothing (a subagent)."""
    archive: RunArchiveInput
    """The run's archive, in one part; its ``version`` is replaced by the one the commit stores."""


@dataclass
class RunCloseResult:
    version: int
    """The thread version the commit stored (the archive's ``version`` when there was no commit)."""
    archive_error: str | None = None
    """Why the archive was not stored, when retrying cannot store it (a conflicting archive, a wrong storage
    config): the commit stands, the run logs it, as it does when its separate ``run.archive`` fails."""


RUN_CLOSE = ActivityRef("run.close", RunCloseInput, RunCloseResult)
"""Commits a closed run's final state and stores its archive, in that order (``activities/run_close.py``)."""
