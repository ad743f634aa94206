"""The circuit breaker's two activities: consult it before a model call, report to it after.

Both run as local activities of the run workflow (``middlewares/llm_error_handling.py``) and talk to the
breaker workflow (``workflows/circuit_breaker.py``) through this worker's client.

* ``llm_breaker.check`` queries the breaker (a query writes no history anywhere) and admits the call when it is
  closed or does not exist yet; only when it is open or half-open does it ask through the ``acquire`` update,
  which decides atomically which caller gets the single half-open probe. A breaker that cannot be reached is
  treated as closed: a broken breaker must not stop model calls.
* ``llm_breaker.report`` signal-with-starts the breaker, so the first failure creates it. Errors propagate,
  so the local activity's retry policy retries them.
"""

from __future__ import annotations

import time
from datetime import timedelta

from temporalio import activity
from temporalio.service import RPCError, RPCStatusCode

from vocabulary.breaker import (
    ACQUIRE_UPDATE,
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
    @activity.defn(name=LLM_BREAKER_CHECK)
    async def check(self, input: BreakerCheckInput) -> BreakerCheckResult:
        handle = activity.client().get_workflow_handle(breaker_workflow_id(input.model))
        try:
            state = await handle.query(STATE_QUERY, result_type=BreakerState, rpc_timeout=_RPC_TIMEOUT)
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

    @activity.defn(name=LLM_BREAKER_REPORT)
    async def report(self, input: BreakerReportInput) -> None:
        model = input.model
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
