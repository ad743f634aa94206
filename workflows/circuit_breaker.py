"""The LLM circuit breaker, shared by every worker of a deployment: one small entity workflow per model.

DeerFlow's breaker (``LLMErrorHandlingMiddleware`` in ``bytedance/deer-flow:
backend/packages/harness/deerflow/agents/middlewares/llm_error_handling_middleware.py``) lives in the middleware
object, so on the Gateway it is per run, and across processes each replica would keep its own. Here the state lives
in Temporal: a long-lived workflow with id ``hartflow-breaker-{provider}-{model}`` owns it, started by the first
report (signal-with-start), and every run of every worker consults and updates the same one. A breaker in the worker
process would need no extra step per call, but each replica would trip on its own share of failures and probe on its
own; a database or Redis would add a dependency the deployment does not have. The workflow also gives the breaker a
durable clock (the cooldown is a workflow timer) and shows its state in the Web UI.

States (DeerFlow's): ``closed`` counts consecutive exhausted retriable failures; at ``failure_threshold``
it opens for ``recovery_timeout_sec``; then ``half_open`` admits exactly one probe; the probe's success
closes it, its failure reopens it. Reports that are neither (non-retriable errors, burst-rate exhaustion,
cancellation) only release the probe, never trip. A probe whose holder vanished is released when its lease
expires, so the breaker cannot stay half-open forever.

Who talks to it (see ``middlewares/llm_error_handling.py``): the ``llm_breaker.check`` local activity
queries ``state`` before a model call (a query writes no history) and uses the ``acquire`` update only when
the breaker is not closed; ``llm_breaker.report`` signals ``report`` after a call when there is something
to change. The breaker continues-as-new when the server suggests it, carrying its state.
"""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta

from temporalio import workflow

from vocabulary.breaker import (
    ACQUIRE_UPDATE,
    REPORT_SIGNAL,
    STATE_QUERY,
    WORKFLOW_NAME,
    Admission,
    BreakerReport,
    BreakerState,
    ProbeRequest,
)

PROBE_POLL = timedelta(seconds=5)
"""How long a caller turned away by an in-flight probe waits before asking again (at most the cooldown)."""


class Breaker:
    """The state machine, pure: the workflow passes its clock in, and unit tests pass theirs."""

    def __init__(self, state: BreakerState) -> None:
        self.state = state

    def refresh(self, now: datetime) -> None:
        """Apply what time alone changes: the cooldown's end and a probe lease's expiry."""
        state = self.state
        if state.phase == "open" and state.open_until is not None and now >= state.open_until:
            state.phase, state.open_until = "half_open", None
            self._free_probe()
        elif state.phase == "half_open" and state.probe_until is not None and now >= state.probe_until:
            self._free_probe()

    def acquire(self, request: ProbeRequest, now: datetime) -> Admission:
        self.refresh(now)
        state = self.state
        if state.phase == "closed":
            return Admission(True, False, "closed")
        if state.phase == "open":
            return Admission(False, False, "open", state.open_until)
        if state.probe_holder in (None, request.holder):
            state.probe_holder = request.holder
            state.probe_until = now + timedelta(seconds=request.lease_seconds)
            return Admission(True, True, "half_open")
        poll = min(PROBE_POLL, timedelta(seconds=state.recovery_timeout_sec))
        return Admission(False, False, "half_open", now + poll)

    def report(self, report: BreakerReport, now: datetime) -> None:
        self.refresh(now)
        state = self.state
        state.failure_threshold = report.failure_threshold
        state.recovery_timeout_sec = report.recovery_timeout_sec
        if report.outcome == "success":
            state.phase, state.failures, state.open_until = "closed", 0, None
            self._free_probe()
        elif report.outcome == "failure":
            if state.phase == "half_open":
                self._open(now)
                return
            state.failures += 1
            # Already open: a late failure extends the cooldown, as DeerFlow's _record_failure does.
            if state.failures >= state.failure_threshold:
                self._open(now)
        elif state.phase == "half_open" and state.probe_holder == report.holder:
            self._free_probe()

    def next_deadline(self) -> datetime | None:
        """When :meth:`refresh` will next change something, if ever."""
        return self.state.open_until if self.state.phase == "open" else self.state.probe_until

    def _open(self, now: datetime) -> None:
        self.state.phase = "open"
        self.state.open_until = now + timedelta(seconds=self.state.recovery_timeout_sec)
        self._free_probe()

    def _free_probe(self) -> None:
        self.state.probe_holder = None
        self.state.probe_until = None


@workflow.defn(name=WORKFLOW_NAME)
class CircuitBreakerWorkflow:
    @workflow.init
    def __init__(self, state: BreakerState) -> None:
        self._breaker = Breaker(state)
        self._changed = False

    @workflow.run
    async def run(self, state: BreakerState) -> None:
        while not workflow.info().is_continue_as_new_suggested():
            self._breaker.refresh(workflow.now())
            self._show()
            self._changed = False
            deadline = self._breaker.next_deadline()
            timeout = None if deadline is None else (deadline - workflow.now()).total_seconds()
            if timeout is not None and timeout <= 0:
                continue
            # Waking at the deadline is the point: refresh() then applies the cooldown's end or the lease's expiry.
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: self._changed or workflow.info().is_continue_as_new_suggested(),
                    timeout=timeout,
                    timeout_summary="cooldown ends" if self._breaker.state.phase == "open" else "probe lease ends",
                )
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(self._breaker.state)

    @workflow.query(name=STATE_QUERY, description="The breaker: phase, consecutive failures, cooldown, probe.")
    def current(self) -> BreakerState:
        return self._breaker.state

    @workflow.update(name=ACQUIRE_UPDATE, description="Admit a call; in half-open, only one probe at a time.")
    def acquire(self, request: ProbeRequest) -> Admission:
        admission = self._breaker.acquire(request, workflow.now())
        self._changed = True
        return admission

    @workflow.signal(name=REPORT_SIGNAL, description="The outcome of an admitted call: success, failure, release.")
    def report(self, report: BreakerReport) -> None:
        self._breaker.report(report, workflow.now())
        self._changed = True

    def _show(self) -> None:
        """The breaker's state as the Web UI's current details (the run loop refreshes it after every change)."""
        state = self._breaker.state
        details = f"**{state.phase}** · {state.failures}/{state.failure_threshold} consecutive failures"
        if state.open_until is not None:
            details += f" · open until {state.open_until.isoformat()}"
        if state.probe_holder is not None:
            details += f" · probe: {state.probe_holder}"
        workflow.set_current_details(details)
