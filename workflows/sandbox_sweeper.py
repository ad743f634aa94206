"""The sandbox sweeper: a workflow that a Temporal Schedule runs every few minutes (``hartflow sandboxes sweep``
runs it on demand).

A run releases its sandbox itself, in ``after_agent`` on the workflow's ``finally`` path. The sweeper catches
what that compensation cannot: pods whose run has closed or never existed (a run *terminated* skips its
``finally``; a release that exhausted its retries; a worker that died between creating the pod and
reporting it), and pods older than ``max_age_seconds`` (a run paused on a question for days keeps its pod
otherwise; its next tool call acquires a fresh one).

    inventory (activity) → states of the runs that acquired them (activity)
    → decide, on the workflow clock → release each doomed pod (activities, in parallel)
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from vocabulary import workflow_ids
from vocabulary.contracts import (
    SANDBOX_INVENTORY,
    SANDBOX_RELEASE,
    SANDBOX_RUN_STATES,
    RunStates,
    RunStatesInput,
    SandboxRecord,
    SandboxReleaseInput,
    ThreadRef,
)
from vocabulary.paths import InvalidIdError

SWEEPER_WORKFLOW_NAME = "HartflowSandboxSweeper"

_QUICK = timedelta(seconds=60)
_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30), maximum_attempts=5)


@dataclass
class SweepInput:
    max_age_seconds: float
    dry_run: bool = False
    """Report what would be deleted, delete nothing."""


@dataclass
class SweptSandbox:
    sandbox_id: str
    pod: str
    thread_id: str
    workflow_id: str
    reason: str


@dataclass
class SweepResult:
    examined: int
    deleted: list[SweptSandbox] = field(default_factory=list)
    """Deleted, or with ``dry_run`` the ones that would be."""
    dry_run: bool = False


def run_workflow_id(record: SandboxRecord) -> str:
    """The run workflow that owns the sandbox: from its label, else derived from its user and thread as runs are
    ("" when the pod names neither validly: then only its age decides)."""
    if record.workflow_id:
        return record.workflow_id
    try:
        return workflow_ids.run_workflow_id(record.user_id, record.thread_id)
    except InvalidIdError:
        return ""


def sweep_reason(record: SandboxRecord, run_state: str | None, now: datetime, max_age: timedelta) -> str | None:
    """Why ``record`` should go, or ``None`` to keep it. ``run_state`` is that of :func:`run_workflow_id`."""
    if run_state == "closed":
        return "run closed"
    if run_state == "missing":
        return "run not found"
    if record.created_at is not None and now - record.created_at > max_age:
        return f"older than {max_age}"
    return None


@workflow.defn(name=SWEEPER_WORKFLOW_NAME)
class SandboxSweeperWorkflow:
    @workflow.run
    async def run(self, input: SweepInput) -> SweepResult:
        inventory = await workflow.execute_activity(
            SANDBOX_INVENTORY,
            result_type=SANDBOX_INVENTORY.output,
            start_to_close_timeout=_QUICK,
            retry_policy=_RETRY,
            summary="Sweeper · list sandbox pods",
        )
        owners = sorted({owner for record in inventory.sandboxes if (owner := run_workflow_id(record))})
        states = RunStates({})
        if owners:
            states = await workflow.execute_activity(
                SANDBOX_RUN_STATES,
                RunStatesInput(owners),
                result_type=SANDBOX_RUN_STATES.output,
                start_to_close_timeout=_QUICK,
                retry_policy=_RETRY,
                summary=f"Sweeper · check {len(owners)} run(s)",
            )
        now, max_age = workflow.now(), timedelta(seconds=input.max_age_seconds)
        doomed: list[tuple[SandboxRecord, SweptSandbox]] = []
        for record in inventory.sandboxes:
            owner = run_workflow_id(record)
            reason = sweep_reason(record, states.states.get(owner), now, max_age)
            if reason is not None:
                doomed.append((record, SweptSandbox(record.sandbox_id, record.pod, record.thread_id, owner, reason)))
        if not input.dry_run:
            await asyncio.gather(*(self._delete(record, swept.reason) for record, swept in doomed))
        verb = "would delete" if input.dry_run else "deleted"
        listed = ", ".join(f"{swept.pod} ({swept.reason})" for _, swept in doomed) or "none"
        workflow.set_current_details(f"**Examined:** {len(inventory.sandboxes)} · **{verb}:** {listed}")
        return SweepResult(
            examined=len(inventory.sandboxes), deleted=[swept for _, swept in doomed], dry_run=input.dry_run
        )

    @staticmethod
    async def _delete(record: SandboxRecord, reason: str) -> None:
        await workflow.execute_activity(
            SANDBOX_RELEASE,
            SandboxReleaseInput(ThreadRef(record.user_id, record.thread_id), record.sandbox_id),
            start_to_close_timeout=_QUICK,
            retry_policy=_RETRY,
            summary=f"Sweeper · delete {record.pod} ({reason})",
        )
