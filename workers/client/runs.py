"""Starting, answering and cancelling a thread's run: the one way every client does it.

The CLI (``workers/cli/runs.py``), the Agent Server (``workers/api/ledger.py``), the benchmarks
(``bench/hartflow_side.py``) and the test helpers (``tests/support``) all start a run with :meth:`Runs.start`, so
a run looks the same in Temporal whoever started it:

- one workflow id per user's thread (``vocabulary/workflow_ids.py``), refused while a run of it is open (Temporal's
  ``WorkflowAlreadyStartedError``; a closed one may be followed by a new run);
- the search attributes the Web UI, ``hartflow runs`` and the thread lookup (``threads.py``) filter on: the five
  of ``workflows/search_attributes.py`` a run starts with (the sixth, its stop reason, comes at its end);
- a one-line summary and details for the Web UI;
- a memo only when the client keeps something with the run (the Agent Server: the API run that started it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import (
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ServerError
from temporalio.service import RPCError, RPCStatusCode

from middlewares.run_settings import RunSettings
from vocabulary.approvals import ReviewInput
from vocabulary.causes import root_cause, root_message, root_type
from vocabulary.contracts import ThreadRef, WebhookTarget
from vocabulary.human_input import ReplyConflictError
from vocabulary.workflow_ids import run_workflow_id
from workers.client import threads
from workflows import search_attributes as sa
from workflows.run import ReplyInput, RunInput, RunView, RunWorkflow
from workflows.thread_queue import QueuedRun

SUMMARY_CHARS = 120


@dataclass(frozen=True)
class RunStart:
    """What a new run starts from; every client fills in the same fields."""

    thread: ThreadRef
    message: str
    model: str
    """The model spec the run uses (``provider:name``, ``scripted:PATH``)."""
    settings: RunSettings
    files: tuple[str, ...] = ()
    """The names of the uploads attached to this message (the run tells the model they are there)."""
    file_entries: tuple[dict[str, Any], ...] = ()
    """DeerFlow's entries for ``files`` (the Agent Server's, ``workers/api/message_files.py``), kept on the
    message for the app's file cards; empty: the message names the files."""
    images: tuple[str, ...] = ()
    """Which of ``files`` are images a vision model sees with the message."""
    message_id: str | None = None
    """The client's id of the user message (DeerFlow's UI sends one): the message keeps it in the thread's state."""
    memo: Mapping[str, Any] = field(default_factory=dict)
    """What the client keeps with the workflow (the Agent Server: the API run that started it)."""
    base_version: int | None = None
    """Start from this committed version instead of the newest (a fork: edit, regenerate); ``None``: the newest."""
    rerun_of: int | None = None
    """The version whose human message this run reruns from ``base_version`` (regenerate)."""
    title: str | None = None
    """A title the run's state starts with (kept across a fork from a version older than a rename)."""
    webhook: WebhookTarget | None = None
    """Where the run POSTs its final view when it ends (checked by the caller: ``workers/api/webhooks.py``)."""


_UNPROCESSED_UPDATE = "UnprocessedUpdate"
"""The failure type of an update the server rejected because the worker completed a workflow task without
processing it (temporalio/temporal ``service/history/workflow/update/errors_failures.go``)."""


class ReplyRefused(Exception):
    """The run refused the answer (its ``reply`` update failed); the message is the run's reason."""

    def __init__(self, reason: str, *, answered_already: bool, not_delivered: bool = False) -> None:
        super().__init__(reason)
        self.answered_already = answered_already
        """Another answer reached the pause first (many clients answering at once)."""
        self.not_delivered = not_delivered
        """Temporal turned the update away before the run saw it (a ``ServerError``: the workflow task that would
        have carried it was lost, e.g. timed out on an overloaded worker). Nothing changed: the same answer may be
        sent again."""


class Runs:
    """The runs of one deployment: its Temporal client (with the config's data converter, ``workers/payloads.py``)
    and the task queue its workers poll (``temporal.task_queue``)."""

    def __init__(self, client: Client, task_queue: str | None = None) -> None:
        self.client = client
        self.task_queue = task_queue
        """Where new runs go; only :meth:`start` needs it (answering or cancelling a run goes by its id)."""

    async def start(self, run: RunStart) -> WorkflowHandle[Any, RunView]:
        """Start ``run`` on its thread's workflow; ``WorkflowAlreadyStartedError`` while a run of it is open."""
        if self.task_queue is None:
            raise ValueError("Runs needs the deployment's task queue (temporal.task_queue) to start a run")
        return await self.client.start_workflow(
            RunWorkflow.run,
            run_input(run),
            id=run_workflow_id(run.thread.user_id, run.thread.thread_id),
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            memo=dict(run.memo) or None,
            static_summary=summary(run),
            static_details=details(run),
            search_attributes=start_attributes(run),
        )

    async def find(self, thread: ThreadRef) -> threads.ThreadWorkflow | None:
        """The workflow holding the thread's newest run (per user, or legacy), described once."""
        return await threads.find(self.client, thread)

    async def reply(self, workflow_id: str, answer: ReplyInput, *, run_id: str | None = None) -> RunView:
        """Answer the run's pending question through its validated ``reply`` update; :class:`ReplyRefused` when
        the run refuses it. A run that is gone raises Temporal's ``RPCError`` (``NOT_FOUND``)."""
        return await self._answer(workflow_id, run_id, "reply", answer)

    async def review(self, workflow_id: str, review: ReviewInput, *, run_id: str | None = None) -> RunView:
        """Decide on the run's pending tool approval through its validated ``review`` update; :class:`ReplyRefused`
        when the run refuses the decisions (nothing is written then)."""
        return await self._answer(workflow_id, run_id, "review", review)

    async def _answer(
        self, workflow_id: str, run_id: str | None, update: str, answer: ReplyInput | ReviewInput
    ) -> RunView:
        """Send ``answer`` through the run's validated ``update``; a refusal is :class:`ReplyRefused`."""
        handle = self.client.get_workflow_handle(workflow_id, run_id=run_id)
        try:
            view: RunView = await handle.execute_update(update, answer, result_type=RunView)
        except WorkflowUpdateFailedError as exc:
            answered = root_type(exc) == ReplyConflictError.__name__
            # Temporal turned it away before the run saw it: a ServerError, or the server's own "UnprocessedUpdate"
            # (the workflow task that carried it completed without handling it, e.g. under load).
            lost = isinstance(root_cause(exc), ServerError) or root_type(exc) == _UNPROCESSED_UPDATE
            raise ReplyRefused(root_message(exc), answered_already=answered, not_delivered=lost) from None
        return view

    async def wait_settled(self, workflow_id: str) -> RunView:
        """Until the run pauses for input or ends (its ``wait_settled`` update)."""
        handle = self.client.get_workflow_handle(workflow_id)
        view: RunView = await handle.execute_update("wait_settled", result_type=RunView)
        return view

    async def cancel(
        self, workflow_id: str, *, run_id: str | None = None, first_execution_run_id: str | None = None
    ) -> bool:
        """Ask the run to cancel (its after_agent hooks still run: they are its compensation); ``False`` when
        Temporal has no such open run. ``first_execution_run_id`` pins one chain of the thread's workflow id, so
        a cancel meant for an old run never reaches a newer one."""
        handle = self.client.get_workflow_handle(
            workflow_id, run_id=run_id, first_execution_run_id=first_execution_run_id
        )
        try:
            await handle.cancel()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            return False
        return True


def summary(run: RunStart) -> str:
    """The Web UI's one line: the message's first line, and the thread."""
    lines = run.message.splitlines()
    first = lines[0][:SUMMARY_CHARS] if lines else "(no message)"
    return f"{first} · thread {run.thread.thread_id}"


def details(run: RunStart) -> str:
    """The Web UI's details (Markdown): who runs what, on which thread."""
    fork = "" if run.base_version is None else f"\n\n**From version:** {run.base_version}"
    return f"**Thread:** {run.thread.thread_id}\n\n**User:** {run.thread.user_id}\n\n**Model:** {run.model}{fork}"


def start_attributes(run: RunStart) -> TypedSearchAttributes:
    """What a run starts with in ``workflows/search_attributes.py`` (its ``run_start``)."""
    return sa.run_start(run.thread.thread_id, run.thread.user_id, run.model)


def run_input(run: RunStart) -> RunInput:
    """The run workflow's input for ``run``."""
    thread = run.thread
    return RunInput(
        thread_id=thread.thread_id,
        user_id=thread.user_id,
        message=run.message,
        model=run.model,
        settings=run.settings,
        message_id=run.message_id,
        files=list(run.files),
        base_version=run.base_version,
        rerun_of=run.rerun_of,
        title=run.title,
        file_entries=list(run.file_entries) or None,
        images=list(run.images),
        webhook=run.webhook,
    )


def queued(run: RunStart, run_id: str) -> QueuedRun:
    """``run`` as the thread's queue starts it (``workflows/thread_queue.py``): what :meth:`Runs.start` sends."""
    return QueuedRun(run_id, run_input(run), dict(run.memo), summary(run), details(run))
