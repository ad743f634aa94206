"""The commands that drive a run: ``run`` starts one, ``reply`` answers its question, ``cancel`` ends it."""

from __future__ import annotations

import argparse
import contextlib
import sys
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from activities.uploads import UploadError, check_uploads
from activities.webhook_urls import WebhookUrlError
from vocabulary.contracts import ThreadRef
from vocabulary.workflow_ids import run_workflow_id
from workers import progress
from workers.cli._common import (
    EXIT_FAILED,
    EXIT_OK,
    BadInput,
    config_of,
    emit,
    emit_view,
    exit_code,
    progress_of,
    thread_of,
)
from workers.cli._follow import follow_to_end, reader_of, running_run, settle, waiting_run
from workers.cli.threads import store_thread_uploads
from workers.client.queue import ThreadQueue
from workers.client.reader import RunClosed, first_run_id, query_open
from workers.client.runs import ReplyRefused, Runs, RunStart, queued
from workers.client.webhooks import webhook_target
from workers.config import HartflowConfig
from workers.models import ModelSelectionError, RunModel, select_model
from workers.stack import Stack
from workflows.run import ReplyInput, RunView, message_problem


async def cmd_run(args: argparse.Namespace) -> int:
    config, thread, message, run_model = _checked_run(args)
    async with Stack(config, quiet=args.json) as stack:
        runs = Runs(stack.client, config.temporal.task_queue)
        # A busy thread is refused before its uploads change under the run in flight (a start that loses a race
        # with another start still fails below, with the files of both in the uploads). The newest run may be
        # one started before ids were per user, under its legacy id: it keeps the thread busy too.
        newest = await runs.find(thread)
        queue = ThreadQueue(stack.client, config.temporal.task_queue)
        busy = newest is not None and newest.running
        # A thread whose queue is open takes the message into it even when idle: it never overtakes a queued one.
        enqueue = args.if_busy == "enqueue" and (busy or await queue.is_open(thread))
        if newest is not None and newest.running and args.if_busy == "interrupt":
            await _interrupt(runs, newest.workflow_id)
        elif newest is not None and newest.running and not enqueue:
            raise BadInput(await _busy_message(stack.client, newest.workflow_id, thread.thread_id))
        try:
            webhook = await webhook_target(config.webhooks, args.webhook, None)
        except WebhookUrlError as exc:
            raise BadInput(str(exc)) from None
        files = store_thread_uploads(config, thread, args.file)
        run = RunStart(
            thread,
            message,
            run_model.spec,
            run_model.settings,
            files=tuple(f.filename for f in files),
            webhook=webhook,
        )
        if enqueue:
            return await _enqueued(args, stack, queue, run)
        handle = await _start_run(runs, run)
        workflow_id = handle.id
        if args.detach:
            return _detached(args, stack, thread, handle)
        first = handle.first_execution_run_id or handle.result_run_id or ""
        return await follow_to_end(args, stack, thread.thread_id, workflow_id, first)


async def _enqueued(args: argparse.Namespace, stack: Stack, queue: ThreadQueue, run: RunStart) -> int:
    """``--if-busy enqueue``: the run waits in the thread's queue (``workflows/thread_queue.py``) and starts when
    the runs before it have ended; followed from its start like any run (``--detach``: once queued)."""
    thread = run.thread
    run_id = str(uuid.uuid4())
    place = await queue.enqueue(thread, queued(run, run_id))
    workflow_id = run_workflow_id(thread.user_id, thread.thread_id)
    if args.detach:
        payload = {"thread_id": thread.thread_id, "queued_run_id": run_id, "place": place, "status": "pending"}
        emit(args, payload, lambda: print(f"queued on thread {thread.thread_id} ({place} before it)"))
        return EXIT_OK
    await queue.started_as(thread, run_id)
    view = await settle(reader_of(stack), thread.thread_id, workflow_id, show=progress_of(args))
    emit_view(args, view, stack, workflow_id)
    return exit_code(view.status)


async def _interrupt(runs: Runs, workflow_id: str) -> None:
    """``--if-busy interrupt``: cancel the thread's run and wait until it closed (its after_agent ran)."""
    handle = runs.client.get_workflow_handle(workflow_id)
    first = first_run_id(await handle.describe())
    await runs.cancel(workflow_id, first_execution_run_id=first)
    with contextlib.suppress(WorkflowFailureError):
        await runs.client.get_workflow_handle(workflow_id, first_execution_run_id=first).result()


def _checked_run(args: argparse.Namespace) -> tuple[HartflowConfig, ThreadRef, str, RunModel]:
    """The run's config, thread, message and model, every one checked before anything is written."""
    overrides: dict[str, Any] = {}
    if args.model:
        overrides["model"] = args.model
    if args.plan_mode:
        overrides["run"] = {"plan_mode": True}
    config = config_of(args, **overrides)
    message = args.message.strip()
    problem = message_problem(message, config.run.max_message_chars)
    if problem is not None:
        raise BadInput(problem)
    # Only an absent --thread means a new thread: an empty one is an invalid id, not a request for a new thread.
    thread = thread_of(config, f"thread-{uuid.uuid4().hex[:12]}" if args.thread is None else args.thread)
    try:
        run_model = select_model(config)
    except ModelSelectionError as exc:
        raise BadInput(str(exc)) from None
    uploads = [Path(p).expanduser() for p in args.file or []]
    try:
        check_uploads(uploads)
    except UploadError as exc:
        raise BadInput(str(exc)) from None
    return config, thread, message, run_model


async def _start_run(runs: Runs, run: RunStart) -> WorkflowHandle[Any, RunView]:
    try:
        return await runs.start(run)
    except WorkflowAlreadyStartedError:  # another start won the race since the thread was found idle
        workflow_id = run_workflow_id(run.thread.user_id, run.thread.thread_id)
        raise BadInput(await _busy_message(runs.client, workflow_id, run.thread.thread_id)) from None


def _detached(args: argparse.Namespace, stack: Stack, thread: ThreadRef, handle: WorkflowHandle[Any, Any]) -> int:
    workflow_id = handle.id
    payload = {
        "thread_id": thread.thread_id,
        "run_id": handle.first_execution_run_id or handle.result_run_id,
        "workflow_id": workflow_id,
        "status": "running",
        "stop_reason": None,
        "final_message": None,
        "pending_input": None,
        "ui_url": stack.ui_url(workflow_id),
    }
    emit(args, payload, lambda: print(f"started run on thread {thread.thread_id} ({workflow_id})"))
    if stack.embedded:
        print(
            "note: embedded mode — the run continues the next time a hartflow command runs",
            file=sys.stderr,
        )
    return EXIT_OK


async def _busy_message(client: Client, workflow_id: str, thread_id: str) -> str:
    handle = client.get_workflow_handle(workflow_id)
    try:
        view = await query_open(handle, "status", result_type=RunView)
        status, run_id = view.status, view.run_id
    except (RunClosed, RPCError):
        description = await handle.describe()
        status, run_id = "running", first_run_id(description)
    return f"thread {thread_id} is busy: run {run_id} is {status} (workflow {workflow_id})"


async def cmd_reply(args: argparse.Namespace) -> int:
    config = config_of(args)
    thread = thread_of(config, args.thread)
    answer = ReplyInput(answer=args.answer if args.answer else None, fields=_parse_fields(args.field))
    async with Stack(config, quiet=args.json) as stack:
        workflow_id, handle, pending = await waiting_run(stack.client, thread)
        if pending is None:
            raise BadInput(f"the run on thread {thread.thread_id} is not waiting for input")
        if args.option is not None:
            answer.option_id = _option_id(pending, args.option)
        answer.request_id = pending.get("request_id")
        seen = await progress.stream_offset(stack.client, workflow_id)
        if args.signal:
            await handle.signal("clarification_reply", _signal_payload(answer))
        else:
            try:
                await Runs(stack.client, config.temporal.task_queue).reply(workflow_id, answer, run_id=handle.run_id)
            except ReplyRefused as exc:
                raise BadInput(f"reply refused: {exc}") from None
        first = first_run_id(await handle.describe())
        return await follow_to_end(args, stack, thread.thread_id, workflow_id, first, offset=seen)


def _parse_fields(items: list[str] | None) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise BadInput(f"--field expects name=value, got {item!r}")
        fields[name.strip()] = value
    return fields


def _option_id(pending: dict[str, Any], choice: str) -> str:
    options = pending.get("options") or []
    if choice.isdigit() and 1 <= int(choice) <= len(options):
        return str(options[int(choice) - 1]["id"])
    if any(option["id"] == choice for option in options):
        return choice
    offered = ", ".join(f"{i} ({o['label']})" for i, o in enumerate(options, 1)) or "none"
    raise BadInput(f"unknown option {choice!r}; offered: {offered}")


def _signal_payload(answer: ReplyInput) -> dict[str, Any]:
    return {k: v for k, v in asdict(answer).items() if v not in (None, {}, "")}


async def cmd_cancel(args: argparse.Namespace) -> int:
    config = config_of(args)
    thread = thread_of(config, args.thread)
    async with Stack(config, quiet=args.json) as stack:
        workflow_id, handle = await running_run(
            stack.client, thread, refusal=f"no active run on thread {thread.thread_id}"
        )
        if not await Runs(stack.client, config.temporal.task_queue).cancel(workflow_id, run_id=handle.run_id):
            raise BadInput(f"no active run on thread {thread.thread_id}")  # it closed since it was found
        view = await reader_of(stack).closed_view(thread.thread_id, handle)
        emit_view(args, view, stack, workflow_id)
        return EXIT_OK if view.status == "cancelled" else EXIT_FAILED
