"""The circuit breaker's two activities: consult it before a model call, report to it after.

Both run as local activities of the run workflow (``middlewares/llm_error_handling.py``) and talk to the
breaker workflow (``workflows/circuit_breaker.py``) through this worker's client.

* ``llm_breaker.check`` queries the breaker (a query writes no history anywhere) and admits the call when it is
  closed or does not exist yet; only when it is open or half-open does it ask through the ``acquire`` update,
  which decides atomically which caller gets the single half-open probe. A breaker that cannot be reached is
  treated as closed: a broken breaker must not stop model calls.

  A closed breaker's answer is kept for :data:`CLOSED_FRESH_SECONDS` and shared by every run of this worker
  process (concurrent checks share one query): the query was the largest part of the check, about 3 ms of a
  35 ms turn (``python -m bench.breakdown``). Only *closed* is kept — open and half-open change with time and
  decide the probe, so they are always asked. A report from this worker forgets the model's answer, so this
  worker's own failures count at once; a breaker opened by *another* worker's reports is seen here at most
  :data:`CLOSED_FRESH_SECONDS` later, which admits that many seconds of calls more to a failing provider (each
  of which fails and reports). A run that found the breaker closed leaves its next checks to its model calls
  (``middlewares/llm_error_handling.py``): the model activity asks the same kept answer
  (:meth:`closed_without_failures`) and turns the call away when the breaker is not closed with no failures.
* ``llm_breaker.report`` signal-with-starts the breaker, so the first failure creates it. Errors propagate,
  so the local activity's retry policy retries them.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from temporalio import activity
from temporalio.service import RPCError, RPCStatusCode

from activities.contract import implements
from vocabulary.breaker import (
    ACQUIRE_UPDATE,
    CLOSED_FRESH_SECONDS,
    REPORT_SIGNAL,
    STATE_QUERY,
    WORKFLOW_NAME,
    Admission,
    BreakerState,
    ProbeRequest,
    breaker_workflow_id,
)
from vocabulary.contracts import (
    LLM_BREAKER_CHECK,
    LLM_BREAKER_REPORT,
    BreakerCheckInput,
    BreakerCheckResult,
    BreakerReportInput,
)

__all__ = ["LlmBreakerActivities"]

_RPC_TIMEOUT = timedelta(seconds=5)


class LlmBreakerActivities:
    """One instance per worker process: its checks share the closed answers it keeps."""

    def __init__(self) -> None:
        self._closed: dict[str, tuple[float, asyncio.Task[BreakerState]]] = {}
        """Per model: when the query was sent (monotonic) and the query itself, while its answer is fresh."""

    async def _state(self, model: str) -> BreakerState:
        """The breaker's state: a fresh closed answer kept from an earlier check, else a new query."""
        kept = self._closed.get(model)
        now = time.monotonic()
        if kept is None or now - kept[0] > CLOSED_FRESH_SECONDS:
            handle = activity.client().get_workflow_handle(breaker_workflow_id(model))
            query = asyncio.ensure_future(handle.query(STATE_QUERY, result_type=BreakerState, rpc_timeout=_RPC_TIMEOUT))
            # Its waiters may all be cancelled before it ends: its outcome is then nobody's, not a logged error.
            query.add_done_callback(lambda done: done.cancelled() or done.exception())
            kept = self._closed[model] = (now, query)
        try:
            state = await asyncio.shield(kept[1])
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return BreakerState()  # no breaker yet: closed (kept: it exists only once a report creates it)
            self._forget(model, kept[1])
            raise
        except Exception:
            self._forget(model, kept[1])
            raise
        if state.phase != "closed":
            self._forget(model, kept[1])
        return state

    async def closed_without_failures(self, model: str) -> bool:
        """Whether a gated model call may go ahead (``activities/model.py``): the breaker of ``model`` is closed
        with no failures, by the answer this worker keeps or a new query; or it cannot be reached, since a broken
        breaker must not stop model calls. Never acquires a probe: that is the run's check."""
        try:
            state = await self._state(model)
        except Exception as exc:
            activity.logger.warning("circuit breaker of %s unreadable, admitting the call: %s", model, exc)
            return True
        return state.phase == "closed" and state.failures == 0

    def _forget(self, model: str, query: asyncio.Task[BreakerState] | None = None) -> None:
        """Drop the kept answer for ``model`` (only if it is still ``query``, when given)."""
        kept = self._closed.get(model)
        if kept is not None and (query is None or kept[1] is query):
            del self._closed[model]

    @implements(LLM_BREAKER_CHECK)
    async def check(self, input: BreakerCheckInput) -> BreakerCheckResult:
        handle = activity.client().get_workflow_handle(breaker_workflow_id(input.model))
        try:
            state = await self._state(input.model)
            if state.phase == "closed":
                return BreakerCheckResult(admitted=True, report_success=state.failures > 0)
            admission = await handle.execute_update(
                ACQUIRE_UPDATE,
                ProbeRequest(input.holder, input.probe_lease_seconds),
                result_type=Admission,
                rpc_timeout=_RPC_TIMEOUT,
            )
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                activity.logger.warning("circuit breaker %s unreachable, admitting the call: %s", handle.id, exc)
            return BreakerCheckResult(admitted=True)
        except Exception as exc:
            activity.logger.warning("circuit breaker %s unreadable, admitting the call: %s", handle.id, exc)
            return BreakerCheckResult(admitted=True)
        retry_in = 0.0
        if admission.retry_at is not None:
            retry_in = max(0.0, admission.retry_at.timestamp() - time.time())
        return BreakerCheckResult(
            admitted=admission.admitted,
            probe=admission.probe,
            report_success=admission.admitted,
            phase=admission.phase,
            retry_in_seconds=retry_in,
        )

    @implements(LLM_BREAKER_REPORT)
    async def report(self, input: BreakerReportInput) -> None:
        model = input.model
        try:
            await activity.client().start_workflow(
                WORKFLOW_NAME,
                BreakerState(),
                id=breaker_workflow_id(model),
                task_queue=activity.info().task_queue,
                start_signal=REPORT_SIGNAL,
                start_signal_args=[input.report],
                static_summary=f"LLM circuit breaker · {model}",
                rpc_timeout=_RPC_TIMEOUT,
            )
        finally:
            # Whatever the report changed, this worker's next check asks (a query sent while the signal was on
            # its way may have read the state before it).
            self._forget(model)
