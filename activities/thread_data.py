"""``thread.ensure_dirs``: create a thread's user-data folders up front (ThreadData with ``lazy_init: false``)."""

from __future__ import annotations

from pathlib import Path

from temporalio.exceptions import ApplicationError

from activities.contract import implements
from activities.no_follow import PathEscapeError
from activities.paths import ThreadPaths
from vocabulary.contracts import THREAD_ENSURE_DIRS, ThreadDirsInput, ThreadDirsResult
from vocabulary.paths import user_data_dirs


class ThreadDataActivities:
    def __init__(self, home: Path) -> None:
        self._home = home

    @implements(THREAD_ENSURE_DIRS)
    def ensure_dirs(self, input: ThreadDirsInput) -> ThreadDirsResult:
        try:
            ThreadPaths(self._home, input.thread.user_id, input.thread.thread_id).ensure_dirs()
        except PathEscapeError as exc:  # a link a run left: retrying cannot fix it
            raise ApplicationError(f"cannot create the thread's folders: {exc}", non_retryable=True) from None
        return ThreadDirsResult(list(user_data_dirs(input.thread.user_id, input.thread.thread_id).values()))
