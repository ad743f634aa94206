"""Finding a thread's run and following it until it settles (waits for input or ends)."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.service import RPCError

from vocabulary.contracts import ThreadRef
from vocabulary.live_tokens import chain_prefix
from workers import progress
from workers.cli._common import BadInput, emit_view, exit_code, progress_of
from workers.cli.live_answer import LiveAnswer
from workers.client import threads
from workers.client.reader import RunClosed, RunReader, query_open
from workers.config import open_object_store
from workers.stack import Stack
from workflows.run import PROGRESS_TOPIC, RunView

_FOLLOW_GRACE_SECONDS = 10.0


def reader_of(stack: Stack) -> RunReader:
    return RunReader(stack.client, open_object_store(stack.config), stack.config.user_id)


def live_answer(
    reader: RunReader, thread_id: str, first_run_id: str, show: Callable[[progress.Event], None] | None
) -> LiveAnswer | None:
    """``show`` with the chain's live tokens (``--events``: as JSON lines; for people: the text); ``None`` for
    ``--json``, whose one line is the result."""
    if show is None:
        return None
    chain = chain_prefix(reader.user_id, thread_id, first_run_id)
    return LiveAnswer(reader.objects, chain, show, events=not isinstance(show, progress.ProgressPrinter))


def archived_events(reader: RunReader, thread_id: str, workflow_id: str) -> progress.Archived:
    """Where :func:`progress.follow` reads on once the run has closed: its archive."""

    async def events(offset: int) -> list[Any] | None:
        archive = await reader.archive(thread_id, await reader.client.get_workflow_handle(workflow_id).describe())
        return None if archive is None else archive.topic(PROGRESS_TOPIC, from_offset=offset)

    return events


async def settle(
    reader: RunReader,
    thread_id: str,
    workflow_id: str,
    *,
    show: Callable[[progress.Event], None] | None,
    offset: int = 0,
) -> RunView:
    """Wait until the run is waiting for input or has ended (following continue-as-new), showing its progress
    events from ``offset`` on as they happen."""
    client = reader.client
    handle = client.get_workflow_handle(workflow_id)
    follower = (
        asyncio.create_task(
            progress.follow(
                client, workflow_id, show, offset=offset, archived=archived_events(reader, thread_id, workflow_id)
            )
        )
        if show
        else None
    )
    view: RunView
    try:
        while True:
            try:
                view = await handle.execute_update("wait_settled", result_type=RunView)
                break
            except (WorkflowUpdateFailedError, RPCError):
                description = await handle.describe()
                if description.status == WorkflowExecutionStatus.RUNNING:
                    continue  # continued as new between our call and its answer: ask the new run
                view = await reader.closed_view(thread_id, handle, description)
                break
        if follower is not None:
            # The settling event is on its way; a run that cannot deliver it must not hold the command.
            await asyncio.wait({follower}, timeout=_FOLLOW_GRACE_SECONDS)
    finally:
        if follower is not None:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
        if isinstance(show, LiveAnswer):
            await show.finish()
        elif isinstance(show, progress.ProgressPrinter):
            show.close()
    return view


async def follow_to_end(
    args: argparse.Namespace, stack: Stack, thread_id: str, workflow_id: str, first_run_id: str, *, offset: int = 0
) -> int:
    """Follow a run the command started or answered until it waits or ends (its answer live, its progress from
    ``offset``), show its view and return the command's exit code."""
    reader = reader_of(stack)
    live = live_answer(reader, thread_id, first_run_id, progress_of(args))
    view = await settle(reader, thread_id, workflow_id, show=live, offset=offset)
    emit_view(args, view, stack, workflow_id, shown=live.shown if live else None)
    return exit_code(view.status)


async def started_thread(client: Client, thread: ThreadRef) -> tuple[str, Any]:
    """The thread's workflow id and the description of its latest run; refused when no run was ever started."""
    found = await threads.find(client, thread)
    if found is None:
        raise BadInput(f"unknown thread {thread.thread_id}: no run has been started on it")
    return found.workflow_id, found.description


async def running_run(client: Client, thread: ThreadRef, *, refusal: str) -> tuple[str, WorkflowHandle[Any, Any]]:
    """The thread's workflow id and a handle on its run, which must be running (else ``refusal``)."""
    workflow_id, description = await started_thread(client, thread)
    if description.status != WorkflowExecutionStatus.RUNNING:
        raise BadInput(refusal)
    return workflow_id, client.get_workflow_handle(workflow_id, run_id=description.run_id)


async def waiting_run(client: Client, thread: ThreadRef) -> tuple[str, WorkflowHandle[Any, Any], dict[str, Any] | None]:
    """The thread's running run (its workflow id and a handle) and what it waits for (its ``pending_input``
    query: ``None`` when nothing); a run that has ended is refused."""
    refusal = f"no run is waiting on thread {thread.thread_id}: its last run has ended"
    workflow_id, handle = await running_run(client, thread, refusal=refusal)
    try:
        pending = await query_open(handle, "pending_input", result_type=dict[str, Any] | None)  # type: ignore[arg-type]
    except RunClosed:
        raise BadInput(refusal) from None
    return workflow_id, handle, pending
