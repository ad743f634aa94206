"""A client interceptor that asks a query again when its replay hit a nondeterminism error.

A query on a run that has just finished goes to the worker that ran it, as a "legacy query" answered by
replaying the run's history. Now and then the SDK's core matches that replay against the wrong slice of
history, and the query fails with ``[TMPRL1100] Nondeterminism error``. Seen in CI and locally:

- ``thread.commit`` against ``thread.load``, and the mirror image. These are a run's last and first
  activities.
- "Activity machine does not handle this event: UpsertWorkflowSearchAttributes" twice in a row, then a
  success.

Runs of those shapes replay cleanly on a fresh worker (checked for a completed run and for a cancelled one
with running children), and so do the committed histories. The window closes within a second or two, so the
query is asked again with a growing pause between attempts.

Real nondeterminism fails every attempt, so nothing is hidden: the last error is raised unchanged, and the
replay tests of committed histories (``tests/test_replay.py``) catch workflow changes before they ship.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from temporalio.client import (
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
    WorkflowQueryFailedError,
)

_log = logging.getLogger(__name__)

NONDETERMINISM_CODE = "[TMPRL1100]"
QUERY_ATTEMPTS = 5
FIRST_RETRY_DELAY_SECONDS = 0.25
"""Doubling: the attempts span about 4 s."""


class QueryReplayRetry(Interceptor):
    """Installed on every hartflow client (:func:`workers.worker.connect`); clients derived with
    :func:`workers.payloads.client_for` keep it."""

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Outbound(next)


class _Outbound(OutboundInterceptor):
    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        for attempt in range(1, QUERY_ATTEMPTS + 1):
            try:
                return await super().query_workflow(input)
            except WorkflowQueryFailedError as exc:
                if NONDETERMINISM_CODE not in exc.message or attempt == QUERY_ATTEMPTS:
                    raise
                _log.warning(
                    "query %r on %s failed in replay (attempt %d of %d), asking again: %s",
                    input.query,
                    input.id,
                    attempt,
                    QUERY_ATTEMPTS,
                    exc.message,
                )
                await asyncio.sleep(FIRST_RETRY_DELAY_SECONDS * 2 ** (attempt - 1))
        raise AssertionError("unreachable: the last attempt returns or raises")
