"""A client interceptor that asks a query again when the worker's replay of the run failed spuriously.

A query on a run that has just finished is a "legacy query": the worker that ran it answers by replaying the
run's history. A finished run is evicted from that worker's cache right after it completes, but the eviction
can lag under load (it waits for the run's coroutines to wind down). A query that arrives in that window can
be matched against the wrong state, and it fails with ``[TMPRL1100] Nondeterminism error``. The same starved
worker can also fail a replay with ``[TMPRL1101] Potential deadlock detected``. Seen in CI and locally:

- ``thread.commit`` against ``thread.load``, and the mirror image. These are a run's last and first
  activities.
- "Activity machine does not handle this event: UpsertWorkflowSearchAttributes".
- "Non-deprecated patch marker encountered … but there is no corresponding change command", five times over 4 s.
- "Potential deadlock detected: workflow didn't yield within 2 second(s)".

Runs of those shapes replay cleanly on a fresh worker (checked for a completed run and for a cancelled one
with running children), and so do the committed histories. So the query is asked again, with pauses doubling
from 0.25 s up to 4 s, for about 16 s in all.

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

REPLAY_FAILURE_CODES = ("[TMPRL1100]", "[TMPRL1101]")
"""Nondeterminism and deadlock detected while the worker replayed the run to answer the query."""
QUERY_ATTEMPTS = 8
FIRST_RETRY_DELAY_SECONDS = 0.25
MAX_RETRY_DELAY_SECONDS = 4.0


class QueryReplayRetry(Interceptor):
    """Installed on every hartflow client (:func:`workers.worker.connect`); clients derived with
    :func:`workers.payloads.client_for` keep it."""

    def __init__(
        self,
        *,
        attempts: int = QUERY_ATTEMPTS,
        first_delay: float = FIRST_RETRY_DELAY_SECONDS,
        max_delay: float = MAX_RETRY_DELAY_SECONDS,
    ) -> None:
        self.delays = [min(first_delay * 2**n, max_delay) for n in range(attempts - 1)]
        """The pause after each failed attempt but the last: one attempt more than pauses."""

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Outbound(next, self)


class _Outbound(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, policy: QueryReplayRetry) -> None:
        super().__init__(next)
        self._policy = policy

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        delays = self._policy.delays
        attempts = len(delays) + 1
        for attempt, delay in enumerate([*delays, None], start=1):
            try:
                return await super().query_workflow(input)
            except WorkflowQueryFailedError as exc:
                if delay is None or not any(code in exc.message for code in REPLAY_FAILURE_CODES):
                    raise
                _log.warning(
                    "query %r on %s failed in replay (attempt %d of %d), asking again: %s",
                    input.query,
                    input.id,
                    attempt,
                    attempts,
                    exc.message,
                )
                await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")
