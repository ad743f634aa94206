"""A client interceptor that asks a query again when its replay hit a nondeterminism error once.

A worker answers a query on a run it no longer holds in its cache (every finished run) by replaying the run's
history. Under load, the SDK's core sometimes matches that replay against the wrong slice of history: the query
fails with ``[TMPRL1100] Nondeterminism error`` naming two activities a replay of the same history does not
confuse (CI saw ``thread.commit`` against ``thread.load`` twice, on a run whose history replays cleanly). The
failed replay is evicted, so asking again replays afresh.

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
QUERY_ATTEMPTS = 3
RETRY_DELAY_SECONDS = 0.2


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
                await asyncio.sleep(RETRY_DELAY_SECONDS * attempt)
        raise AssertionError("unreachable: the last attempt returns or raises")
