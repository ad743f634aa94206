"""Thread and run status, LangGraph's way, read from the thread's workflow in Temporal.

=================================  ======================  ===========================================
hartflow run                       LangGraph run           LangGraph thread
=================================  ======================  ===========================================
running                            ``running``             ``busy``
awaiting_input (clarification)     ``success``             ``interrupted`` with ``interrupts``
awaiting_approval (tool approval)  ``success``             ``interrupted`` with ``interrupts``
completed                          ``success``             ``idle``
error                              ``error``               ``error``
cancelled                          ``interrupted``         ``idle``
=================================  ======================  ===========================================

An API run is one segment of the workflow (from a start or a resume to the pause or the end): a segment that a
later one follows ended at a pause, so it succeeded. Temporal describes only the newest chain of a thread: how an
older chain's last run ended is written in its record when a newer chain replaces it (by the API start that
replaces it, or on the next read when the thread's queue or the CLI did, ``replaced_chain_status``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHistoryEventFilterType,
)

from vocabulary.contracts import ThreadRef
from workers.api.records import RunRecord, from_memo
from workers.api.served import interrupt_value
from workers.client import threads
from workflows import search_attributes as sa

_CLOSED = {
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.FAILED: "error",
    WorkflowExecutionStatus.TERMINATED: "error",
    WorkflowExecutionStatus.TIMED_OUT: "timeout",
}
RUN_STATUS = {
    "running": "running",
    "awaiting_input": "success",
    "completed": "success",
    "error": "error",
    "cancelled": "interrupted",
    "timeout": "timeout",
}
THREAD_STATUS = {
    "none": "idle",
    "running": "busy",
    "awaiting_input": "interrupted",
    "completed": "idle",
    "error": "error",
    "cancelled": "idle",
    "timeout": "error",
}


@dataclass
class Chain:
    """The thread's newest workflow chain as Temporal describes it (``status`` ``none``: no run ever)."""

    first_run_id: str | None
    status: str
    started_by: RunRecord | None = None
    """The API run that started the chain, from its memo (``records.RUN_MEMO``); ``None`` for a CLI run."""
    workflow_id: str | None = None
    """The workflow holding the chain (``workers/client/threads.py``): per user, or a legacy run's."""

    @property
    def active(self) -> bool:
        return self.status in ("running", "awaiting_input")

    @property
    def thread_status(self) -> str:
        return THREAD_STATUS[self.status]


async def chain(client: Client, thread: ThreadRef) -> Chain:
    found = await threads.find(client, thread)
    if found is None:
        return Chain(None, "none")
    description = found.description
    attributes = description.typed_search_attributes
    first = description.raw_info.first_run_id or description.run_id
    started_by = from_memo(dict(await description.memo()), first)
    if description.status == WorkflowExecutionStatus.RUNNING:
        paused = attributes.get(sa.STATUS) in ("awaiting_input", "awaiting_approval")
        return Chain(first, "awaiting_input" if paused else "running", started_by, found.workflow_id)
    return Chain(first, _closed(description), started_by, found.workflow_id)


def _closed(description: WorkflowExecutionDescription) -> str:
    """How a closed workflow run ended, in hartflow's words (a run that recorded an error completes its workflow
    with the ``HartflowStatus`` attribute ``error``)."""
    if description.status in _CLOSED:
        return _CLOSED[description.status]
    closed = description.typed_search_attributes.get(sa.STATUS)
    return "error" if closed == "error" else "completed"


async def replaced_chain_status(client: Client, workflow_id: str, first_run_id: str) -> str | None:
    """How the chain that started as ``first_run_id`` ended, followed run by run through its continue-as-new
    hops (Temporal describes one run, and only the newest chain under the id); ``None`` while it runs."""
    run_id = first_run_id
    while True:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        description = await handle.describe()
        if description.status == WorkflowExecutionStatus.RUNNING:
            return None
        if description.status != WorkflowExecutionStatus.CONTINUED_AS_NEW:
            return _closed(description)
        next_run = ""
        async for event in handle.fetch_history_events(event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT):
            next_run = event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
        if not next_run:
            return None  # no continue-as-new event to follow: nothing is known
        run_id = next_run


def run_status(record: RunRecord, current: Chain, followed: bool) -> str:
    """The LangGraph status of the run ``record``; ``followed``: a later run of the same chain exists."""
    if record.final_status:
        return record.final_status
    if not record.workflow_run_id:
        return "pending"  # queued, not started yet (workers/api/queued.py)
    if current.first_run_id != record.workflow_run_id or followed:
        return "success"
    return RUN_STATUS.get(current.status, "success")


def followed(record: RunRecord, siblings: list[RunRecord]) -> bool:
    """Whether a later run resumed ``record``'s chain (``record`` then ended at a pause)."""
    return any(
        other.workflow_run_id == record.workflow_run_id and other.start_offset > record.start_offset
        for other in siblings
    )


def pending_request(values: dict[str, Any] | None, request_id: str | None = None) -> dict[str, Any] | None:
    """The ``human_input_request`` a pause asks, from the state: the ask_clarification ToolMessage carries it
    (``artifact.human_input``), and the run commits it before it pauses, so storage answers without a worker. A
    pending tool approval (the ``approvals`` channel, ``vocabulary/approvals.py``) comes first: it is decided
    before the turn's clarification is asked."""
    for approval in reversed((values or {}).get("approvals") or []):
        if approval.get("status") == "pending" and request_id in (None, approval.get("request_id")):
            return dict(approval)
    for message in reversed((values or {}).get("messages") or []):
        request = (message.get("artifact") or {}).get("human_input") if message.get("type") == "tool" else None
        if isinstance(request, dict) and (request_id is None or request.get("request_id") == request_id):
            return request
    return None


def interrupts(current: Chain, values: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The thread's interrupts, LangGraph's way: the pending question while its run is paused (its value:
    ``workers/api/served.py``)."""
    request = pending_request(values) if current.status == "awaiting_input" else None
    if request is None:
        return []
    return [{"id": str(request.get("request_id") or "ask_clarification"), "value": interrupt_value(request)}]
