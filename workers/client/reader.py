"""Reading a thread's latest run from outside, without ever replaying a closed run.

An open run answers its queries from the worker that holds it. A closed run is answered from what it wrote: its
archive (``activities/run_archive.py``: final view with its chain, whole workflow stream), else its result (a run
from before archives). Queries go out with ``reject_condition=NOT_OPEN``: a run that closes between our describe
and our query is refused by the server (no worker replays it), and we read its archive instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, TypeVar

from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryRejectedError,
)
from temporalio.common import QueryRejectCondition

from activities.run_archive import RunArchive, load_run_archive
from activities.storage import ObjectStore
from vocabulary.causes import root_cause
from workflows import search_attributes as sa
from workflows.run import PROGRESS_TOPIC, RunStatus, RunView

T = TypeVar("T")
_VIEW_FIELDS = frozenset(field.name for field in dataclasses.fields(RunView))


class RunClosed(Exception):
    """The run is no longer open: read what it left behind instead of asking it."""


async def query_open(handle: WorkflowHandle[Any, Any], name: str, *, result_type: type[T]) -> T:
    """Ask an open run; :class:`RunClosed` when it has closed (the server refuses before any worker replays)."""
    try:
        result: T = await handle.query(name, result_type=result_type, reject_condition=QueryRejectCondition.NOT_OPEN)
    except WorkflowQueryRejectedError:
        raise RunClosed(handle.id) from None
    return result


def first_run_id(description: WorkflowExecutionDescription) -> str:
    """The id the run is known by (``RunView.run_id``, the archive's key): its first execution's, across
    continue-as-new."""
    return description.raw_description.workflow_execution_info.first_run_id or description.run_id


class RunReader:
    """The latest run of a thread, for one user: live while it is open, from storage once it closed."""

    def __init__(self, client: Client, objects: ObjectStore, user_id: str) -> None:
        self.client = client
        self.objects = objects
        self.user_id = user_id

    async def archive(self, thread_id: str, description: WorkflowExecutionDescription) -> RunArchive | None:
        return await load_run_archive(self.objects, self.user_id, thread_id, first_run_id(description))

    async def view(self, thread_id: str, workflow_id: str) -> RunView:
        """The run as ``status`` shows it (with its chain), open or closed."""
        handle = self.client.get_workflow_handle(workflow_id)
        description = await handle.describe()
        if description.status == WorkflowExecutionStatus.RUNNING:
            try:
                return await query_open(handle, "status", result_type=RunView)
            except RunClosed:
                description = await handle.describe()
        return await self.closed_view(thread_id, handle, description)

    async def closed_view(
        self,
        thread_id: str,
        handle: WorkflowHandle[Any, Any],
        description: WorkflowExecutionDescription | None = None,
    ) -> RunView:
        """A closed run's final view (waiting for it to close first): its archive, else its result or failure
        (runs from before archives)."""
        description = description or await handle.describe()
        if description.status == WorkflowExecutionStatus.RUNNING:
            # Being cancelled, or just settled: its compensation and archive are still to come.
            with contextlib.suppress(WorkflowFailureError):
                await handle.result()
            description = await handle.describe()
        archive = await self.archive(thread_id, description)
        if archive is not None:
            return RunView(**{key: value for key, value in archive.view.items() if key in _VIEW_FIELDS})
        return await _view_from_result(handle)

    async def closed_events(
        self, thread_id: str, description: WorkflowExecutionDescription, *, from_offset: int = 0
    ) -> list[dict[str, Any]] | None:
        """A closed run's progress events from its archive, or ``None`` when it has none."""
        archive = await self.archive(thread_id, description)
        if archive is None:
            return None
        return [event.data for event in archive.topic(PROGRESS_TOPIC, from_offset=from_offset)]


async def _view_from_result(handle: WorkflowHandle[Any, Any]) -> RunView:
    try:
        return RunView(**await handle.result())  # WorkflowHandle.result() takes no result_type: a JSON object
    except WorkflowFailureError as exc:
        # Described once closed: a run being cancelled still runs its compensation (after_agent) first.
        description = await handle.describe()
        status: RunStatus = "cancelled" if description.status == WorkflowExecutionStatus.CANCELED else "error"
        attributes = description.typed_search_attributes
        cause = root_cause(exc.cause)
        return RunView(
            thread_id=attributes.get(sa.THREAD_ID) or "",
            run_id=description.run_id,
            workflow_id=description.id,
            status=status,
            stop_reason=attributes.get(sa.STOP_REASON),
            final_message=None if status == "cancelled" else f"run failed: {cause}",
            pending_input=None,
            turns=attributes.get(sa.TURNS) or 0,
            model=attributes.get(sa.MODEL) or "",
        )
