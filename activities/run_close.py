"""``run.close``: a closed run's final commit and its archive in one activity, so its end is one workflow-task round
instead of two (``workflows/run/finish.py`` says when a run uses it).

The commit comes first and fails the activity as ``thread.commit`` would (a conflict is not retried; anything
else is). The archive follows, stored with the version the commit returned. An archive that retrying cannot store
(a different archive already there, a wrong storage config) is reported in the result, not raised: the commit
stands, as it does when a separate ``run.archive`` fails. A retried attempt commits again, which the thread store
recognises as the same commit (``activities/thread_store.py``), and stores the same archive bytes, which the
create-only write accepts (``activities/run_archive.py``).
"""

from __future__ import annotations

import dataclasses

from temporalio.exceptions import ApplicationError

from activities.contract import implements
from activities.run_archive import RunArchiveActivities
from activities.thread_store import ThreadStoreActivities
from vocabulary.contracts import RUN_CLOSE, RunCloseInput, RunCloseResult


class RunCloseActivities:
    def __init__(self, threads: ThreadStoreActivities, archives: RunArchiveActivities):
        self._threads = threads
        self._archives = archives

    @implements(RUN_CLOSE)
    def close(self, input: RunCloseInput) -> RunCloseResult:
        version = input.archive.version
        if input.commit is not None:
            version = self._threads.commit(input.commit).version
        try:
            self._archives.archive(dataclasses.replace(input.archive, version=version))
        except ApplicationError as exc:
            if not exc.non_retryable:
                raise
            return RunCloseResult(version, archive_error=f"{exc.type}: {exc}")
        return RunCloseResult(version)
