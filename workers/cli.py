"""The ``hartflow`` command line.

Exit codes (a contract): 0 completed, 3 awaiting input, 1 failed or cancelled, 2 bad input (nothing written).
Every command takes ``--json`` for machines; without it the output is for people.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, get_args

from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities.models import validate_model_spec
from activities.paths import InvalidIdError, validate_thread_id, validate_user_id
from activities.sandbox.kubernetes import KubernetesSandboxProvider
from activities.sandbox_sweeper import run_state
from activities.skills import load_skills
from activities.storage import StorageConfigError, StorageError
from activities.thread_lifecycle import delete_thread, list_threads
from activities.uploads import UploadError, check_uploads, store_uploads
from workers import progress, telemetry
from workers.config import ConfigError, HartflowConfig, load_config, open_object_store
from workers.devserver import DevServerError, TemporalCliNotFound, ensure_search_attributes, hard_exit
from workers.run_reader import RunClosed, RunReader, first_run_id, query_open
from workers.stack import Stack, TemporalUnreachable
from workers.worker import build_worker, ensure_sweeper_schedule, thread_store
from workflows import search_attributes as sa
from workflows.contracts import ThreadRef, UploadedFile
from workflows.messages import message_text
from workflows.paths import VIRTUAL_UPLOADS_DIR
from workflows.run import (
    PROGRESS_TOPIC,
    WORKFLOW_NAME,
    ReplyInput,
    RunInput,
    RunStatus,
    RunView,
    RunWorkflow,
    message_problem,
    workflow_id_for,
)
from workflows.sandbox_sweeper import SandboxSweeperWorkflow, SweepInput, SweepResult, run_workflow_id

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_AWAITING = 0, 1, 2, 3

_FOLLOW_GRACE_SECONDS = 10.0


class BadInput(Exception):
    """Refused before anything was written; exit 2 with this one-line message."""


# -- shared plumbing ----------------------------------------------------------------------------------------


def _config(args: argparse.Namespace, **overrides: Any) -> HartflowConfig:
    return load_config(Path(args.config) if args.config else None, overrides=overrides)


def _thread(config: HartflowConfig, thread_id: str) -> ThreadRef:
    try:
        return ThreadRef(validate_user_id(config.user_id), validate_thread_id(thread_id))
    except InvalidIdError as exc:
        raise BadInput(str(exc)) from None


def _exit_code(status: str) -> int:
    return {"completed": EXIT_OK, "awaiting_input": EXIT_AWAITING}.get(status, EXIT_FAILED)


def _emit(args: argparse.Namespace, payload: dict[str, Any], human: Callable[[], None]) -> None:
    if getattr(args, "events", False):
        # The last line of an --events stream: the run as --json shows it, marked so a reader knows it is the end.
        print(json.dumps({"kind": "result", **payload}, ensure_ascii=False, default=str))
    elif args.json:
        print(json.dumps(payload, ensure_ascii=False, default=str))
    else:
        human()


def _view_payload(view: RunView, stack: Stack | None) -> dict[str, Any]:
    payload = asdict(view)
    payload["ui_url"] = stack.ui_url(view.workflow_id, view.run_id) if stack else None
    return payload


def _print_view(view: RunView, ui_url: str | None) -> None:
    if view.status == "awaiting_input" and view.pending_input:
        request = view.pending_input
        print(f"\n{request.get('question', '')}")
        for index, option in enumerate(request.get("options") or [], 1):
            print(f"  {index}. {option['label']}")
        print(f"\nThe run is waiting. Answer with: hartflow reply {view.thread_id} 'your answer'")
    elif view.final_message:
        print(view.final_message)
    line = f"[{view.status}] thread {view.thread_id} · run {view.run_id} · {view.turns} turn(s)"
    if view.stop_reason:
        line += f" · stop reason {view.stop_reason}"
    print(line, file=sys.stderr)
    if ui_url:
        print(f"Web UI: {ui_url}", file=sys.stderr)


def _progress(args: argparse.Namespace) -> Callable[[progress.Event], None] | None:
    """How this command shows progress: JSON lines (``--events``), lines for people, or not at all (``--json``)."""
    if args.events:
        return progress.json_lines()
    return None if args.json else progress.ProgressPrinter()


def _reader(stack: Stack) -> RunReader:
    return RunReader(stack.client, open_object_store(stack.config), stack.config.user_id)


def _archived(reader: RunReader, thread_id: str, workflow_id: str) -> progress.Archived:
    """Where :func:`progress.follow` reads on once the run has closed: its archive."""

    async def events(offset: int) -> list[Any] | None:
        archive = await reader.archive(thread_id, await reader.client.get_workflow_handle(workflow_id).describe())
        return None if archive is None else archive.topic(PROGRESS_TOPIC, from_offset=offset)

    return events


async def _settle(
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
                client, workflow_id, show, offset=offset, archived=_archived(reader, thread_id, workflow_id)
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
        if isinstance(show, progress.ProgressPrinter):
            show.close()
    return view


async def _started_thread(client: Client, thread_id: str) -> tuple[str, Any]:
    """The thread's workflow id and the description of its latest run; refused when no run was ever started."""
    workflow_id = workflow_id_for(thread_id)
    description = await _describe_thread(client, workflow_id)
    if description is None:
        raise BadInput(f"unknown thread {thread_id}: no run has been started on it")
    return workflow_id, description


async def _running_run(client: Client, thread_id: str, *, refusal: str) -> tuple[str, WorkflowHandle[Any, Any]]:
    """The thread's workflow id and a handle on its run, which must be running (else ``refusal``)."""
    workflow_id, description = await _started_thread(client, thread_id)
    if description.status != WorkflowExecutionStatus.RUNNING:
        raise BadInput(refusal)
    return workflow_id, client.get_workflow_handle(workflow_id)


async def _describe_thread(client: Client, workflow_id: str) -> Any:
    try:
        return await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


# -- commands -----------------------------------------------------------------------------------------------


async def cmd_run(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {}
    if args.model:
        overrides["model"] = args.model
    if args.plan_mode:
        overrides["run"] = {"plan_mode": True}
    config = _config(args, **overrides)
    message = args.message.strip()
    problem = message_problem(message, config.run.max_message_chars)
    if problem is not None:
        raise BadInput(problem)
    # Only an absent --thread means a new thread: an empty one is an invalid id, not a request for a new thread.
    thread = _thread(config, f"thread-{uuid.uuid4().hex[:12]}" if args.thread is None else args.thread)
    model = _model_spec(config)
    uploads = [Path(p).expanduser() for p in args.file or []]
    try:
        check_uploads(uploads)
    except UploadError as exc:
        raise BadInput(str(exc)) from None
    async with Stack(config, quiet=args.json) as stack:
        workflow_id = workflow_id_for(thread.thread_id)
        # A busy thread is refused before its uploads change under the run in flight (a start that loses a race
        # with another start still fails below, with the files of both in the uploads).
        running = await _describe_thread(stack.client, workflow_id)
        if running is not None and running.status == WorkflowExecutionStatus.RUNNING:
            raise BadInput(await _busy_message(stack.client, workflow_id, thread.thread_id))
        files = _store_uploads(config, thread, args.file)
        try:
            handle = await stack.client.start_workflow(
                RunWorkflow.run,
                RunInput(
                    thread_id=thread.thread_id,
                    user_id=thread.user_id,
                    message=message,
                    model=model,
                    settings=config.run,
                    files=[file.filename for file in files],
                ),
                id=workflow_id,
                task_queue=config.temporal.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                static_summary=f"{message.splitlines()[0][:120]} · thread {thread.thread_id}",
                static_details=f"**Thread:** {thread.thread_id}\n\n**User:** {thread.user_id}\n\n**Model:** {model}",
                search_attributes=TypedSearchAttributes(
                    [
                        SearchAttributePair(sa.THREAD_ID, thread.thread_id),
                        SearchAttributePair(sa.USER_ID, thread.user_id),
                        SearchAttributePair(sa.STATUS, "running"),
                        SearchAttributePair(sa.MODEL, model),
                        SearchAttributePair(sa.TURNS, 0),
                    ]
                ),
            )
        except WorkflowAlreadyStartedError:
            raise BadInput(await _busy_message(stack.client, workflow_id, thread.thread_id)) from None
        if args.detach:
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
            _emit(args, payload, lambda: print(f"started run on thread {thread.thread_id} ({workflow_id})"))
            if stack.embedded:
                print(
                    "note: embedded mode — the run continues the next time a hartflow command runs",
                    file=sys.stderr,
                )
            return EXIT_OK
        view = await _settle(_reader(stack), thread.thread_id, workflow_id, show=_progress(args))
        _emit(
            args,
            _view_payload(view, stack),
            lambda: _print_view(view, stack.ui_url(workflow_id, view.run_id)),
        )
        return _exit_code(view.status)


def _model_spec(config: HartflowConfig) -> str:
    if not config.model:
        raise BadInput("no model configured: pass --model SPEC or set 'model' in hartflow.yaml")
    spec = config.model
    provider, _, rest = spec.partition(":")
    if provider == "scripted" and rest:
        # The worker may run elsewhere: hand it an absolute path.
        spec = f"scripted:{Path(rest).expanduser().resolve()}"
    try:
        validate_model_spec(spec)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    return spec


async def _busy_message(client: Client, workflow_id: str, thread_id: str) -> str:
    handle = client.get_workflow_handle(workflow_id)
    try:
        view = await query_open(handle, "status", result_type=RunView)
        status, run_id = view.status, view.run_id
    except (RunClosed, RPCError):
        description = await handle.describe()
        status, run_id = "running", first_run_id(description)
    return f"thread {thread_id} is busy: run {run_id} is {status} (workflow {workflow_id})"


def cmd_upload(args: argparse.Namespace) -> int:
    config = _config(args)
    thread = _thread(config, args.thread)
    files = _store_uploads(config, thread, args.files)
    listed = [{"filename": f.filename, "size": f.size, "path": f"{VIRTUAL_UPLOADS_DIR}/{f.filename}"} for f in files]

    def human() -> None:
        for entry in listed:
            print(f"{entry['filename']} ({entry['size']} bytes) → {entry['path']}")
        print(f"uploaded {len(listed)} file(s) to thread {thread.thread_id}", file=sys.stderr)

    _emit(args, {"thread_id": thread.thread_id, "files": listed}, human)
    return EXIT_OK


def _store_uploads(config: HartflowConfig, thread: ThreadRef, paths: list[str] | None) -> list[UploadedFile]:
    """Copy files into the thread's uploads folder (checked first: a bad name or path writes nothing)."""
    if not paths:
        return []
    try:
        return store_uploads(open_object_store(config), thread, [Path(p).expanduser() for p in paths])
    except UploadError as exc:
        raise BadInput(str(exc)) from None


async def cmd_reply(args: argparse.Namespace) -> int:
    config = _config(args)
    thread = _thread(config, args.thread)
    answer = ReplyInput(answer=args.answer if args.answer else None, fields=_parse_fields(args.field))
    async with Stack(config, quiet=args.json) as stack:
        workflow_id, handle = await _running_run(
            stack.client,
            thread.thread_id,
            refusal=f"no run is waiting on thread {thread.thread_id}: its last run has ended",
        )
        try:
            pending = await query_open(handle, "pending_input", result_type=dict[str, Any] | None)  # type: ignore[arg-type]
        except RunClosed:
            raise BadInput(f"no run is waiting on thread {thread.thread_id}: its last run has ended") from None
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
                await handle.execute_update("reply", answer, result_type=RunView)
            except WorkflowUpdateFailedError as exc:
                raise BadInput(f"reply refused: {_root_message(exc)}") from None
        view = await _settle(_reader(stack), thread.thread_id, workflow_id, show=_progress(args), offset=seen)
        _emit(
            args,
            _view_payload(view, stack),
            lambda: _print_view(view, stack.ui_url(workflow_id, view.run_id)),
        )
        return _exit_code(view.status)


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


def _root_message(exc: BaseException) -> str:
    cause: BaseException = exc
    while getattr(cause, "cause", None) is not None:
        cause = cause.cause  # type: ignore[attr-defined]
    return str(getattr(cause, "message", None) or cause)


async def cmd_status(args: argparse.Namespace) -> int:
    config = _config(args)
    thread = _thread(config, args.thread)
    async with Stack(config, quiet=args.json) as stack:
        workflow_id, _ = await _started_thread(stack.client, thread.thread_id)
        view = await _reader(stack).view(thread.thread_id, workflow_id)
        _emit(args, _view_payload(view, stack), lambda: _print_view(view, stack.ui_url(workflow_id, view.run_id)))
        return EXIT_OK


async def cmd_runs(args: argparse.Namespace) -> int:
    config = _config(args)
    query = _runs_query(config, args.status, args.thread)
    async with Stack(config, need_worker=False, ui=False, quiet=args.json) as stack:
        rows = [_run_row(execution) async for execution in stack.client.list_workflows(query, limit=args.limit)]

    def human() -> None:
        if not rows:
            print("no runs match", file=sys.stderr)
            return
        print(f"{'THREAD':<28} {'STATUS':<15} {'TURNS':>5}  {'STARTED':<20} {'MODEL':<28} STOP REASON")
        for row in rows:
            started = row["started_at"][:19].replace("T", " ") if row["started_at"] else "?"
            print(
                f"{row['thread_id']:<28} {row['status']:<15} {row['turns']:>5}  {started:<20} "
                f"{_model_label(row['model']):<28} {row['stop_reason'] or ''}"
            )

    _emit(args, {"query": query, "runs": rows}, human)
    return EXIT_OK


def _runs_query(config: HartflowConfig, status: str | None, thread: str | None) -> str:
    """A visibility query over hartflow runs; ids are validated first, so they cannot break out of the quotes."""
    clauses = [f'WorkflowType = "{WORKFLOW_NAME}"', 'ExecutionStatus != "ContinuedAsNew"']
    if status:
        clauses.append(f'{sa.STATUS.name} = "{status}"')
    if thread:
        clauses.append(f'{sa.THREAD_ID.name} = "{_thread(config, thread).thread_id}"')
    return " AND ".join(clauses)


def _run_row(execution: WorkflowExecution) -> dict[str, Any]:
    attributes = execution.typed_search_attributes
    status = attributes.get(sa.STATUS) or "running"
    if execution.status not in (None, WorkflowExecutionStatus.RUNNING) and status in ("running", "awaiting_input"):
        # Terminated or timed out from outside: the run never got to say how it ended.
        status = execution.status.name.lower()
    return {
        "thread_id": attributes.get(sa.THREAD_ID) or "",
        "user_id": attributes.get(sa.USER_ID),
        "workflow_id": execution.id,
        "run_id": execution.run_id,
        "status": status,
        "execution_status": execution.status.name.lower() if execution.status else None,
        "turns": attributes.get(sa.TURNS) or 0,
        "model": attributes.get(sa.MODEL) or "",
        "stop_reason": attributes.get(sa.STOP_REASON),
        "started_at": execution.start_time.isoformat() if execution.start_time else None,
        "closed_at": execution.close_time.isoformat() if execution.close_time else None,
    }


def _model_label(spec: str) -> str:
    provider, _, name = spec.partition(":")
    return f"{provider}:{Path(name).name}" if provider == "scripted" else spec


async def cmd_events(args: argparse.Namespace) -> int:
    config = _config(args)
    thread = _thread(config, args.thread)
    async with Stack(config, ui=False, quiet=True) as stack:
        workflow_id, description = await _started_thread(stack.client, thread.thread_id)
        reader = _reader(stack)
        show = progress.json_lines()
        until: int | None = None
        if description.status == WorkflowExecutionStatus.RUNNING and not args.follow:
            try:
                until = await progress.stream_offset(stack.client, workflow_id)
            except WorkflowQueryRejectedError:
                description = await stack.client.get_workflow_handle(workflow_id).describe()  # closed meanwhile
        if description.status == WorkflowExecutionStatus.RUNNING:
            archived = _archived(reader, thread.thread_id, workflow_id)
            await progress.follow(stack.client, workflow_id, show, offset=args.start, until=until, archived=archived)
            return EXIT_OK
        events = await reader.closed_events(thread.thread_id, description, from_offset=args.start)
        if events is None:
            raise BadInput(
                f"run {first_run_id(description)} on thread {thread.thread_id} ended before hartflow archived "
                "runs: its events are only in its Temporal history"
            )
        for event in events:
            show(event)
    return EXIT_OK


async def cmd_cancel(args: argparse.Namespace) -> int:
    config = _config(args)
    thread = _thread(config, args.thread)
    async with Stack(config, quiet=args.json) as stack:
        workflow_id, handle = await _running_run(
            stack.client, thread.thread_id, refusal=f"no active run on thread {thread.thread_id}"
        )
        await handle.cancel()
        view = await _reader(stack).closed_view(thread.thread_id, handle)
        _emit(
            args,
            _view_payload(view, stack),
            lambda: _print_view(view, stack.ui_url(workflow_id, view.run_id)),
        )
        return EXIT_OK if view.status == "cancelled" else EXIT_FAILED


async def cmd_threads(args: argparse.Namespace) -> int:
    config = _config(args)
    try:
        user_id = validate_user_id(config.user_id)
    except InvalidIdError as exc:
        raise BadInput(str(exc)) from None
    objects = open_object_store(config)
    if args.action == "delete":
        return await _delete_thread(args, config)
    if args.thread:
        raise BadInput("threads list takes no THREAD")
    summaries = await asyncio.to_thread(list_threads, objects, user_id)
    async with Stack(config, need_worker=False, ui=False, quiet=True) as stack:
        runs = [await _describe_thread(stack.client, workflow_id_for(s.thread_id)) for s in summaries]
    rows = [
        {**asdict(summary), "run_status": _run_row(run)["status"] if run is not None else None}
        for summary, run in zip(summaries, runs, strict=True)
    ]

    def human() -> None:
        if not rows:
            print(f"no threads in {objects.describe()}", file=sys.stderr)
            return
        print(f"{'THREAD':<28} {'VERSION':>7} {'MESSAGES':>8}  {'UPDATED':<20} {'RUN':<15} TITLE")
        for row in rows:
            updated = row["updated"][:19].replace("T", " ") if row["updated"] else "-"
            print(
                f"{row['thread_id']:<28} {row['version']:>7} {row['messages']:>8}  {updated:<20} "
                f"{row['run_status'] or '-':<15} {row['title'] or ''}"
            )

    _emit(args, {"storage": objects.describe(), "threads": rows}, human)
    return EXIT_OK


async def _delete_thread(args: argparse.Namespace, config: HartflowConfig) -> int:
    if not args.thread:
        raise BadInput("threads delete needs the THREAD to delete")
    thread = _thread(config, args.thread)
    if not args.yes:
        raise BadInput(f"deleting thread {thread.thread_id} removes its state and files for good: add --yes")
    objects = open_object_store(config)
    workflow_id = workflow_id_for(thread.thread_id)
    async with Stack(config, need_worker=False, ui=False, quiet=True) as stack:
        run = await _describe_thread(stack.client, workflow_id)
    if run is not None and run.status == WorkflowExecutionStatus.RUNNING:
        raise BadInput(
            f"thread {thread.thread_id} is busy: run {run.run_id} is {_run_row(run)['status']} "
            f"(workflow {workflow_id}); cancel it first: hartflow cancel {thread.thread_id}"
        )
    deleted = await asyncio.to_thread(delete_thread, objects, thread, config.home)
    if not deleted.removed and deleted.local_dir is None:
        raise BadInput(f"unknown thread {thread.thread_id}: nothing is stored for it in {objects.describe()}")
    payload = {**asdict(deleted), "removed": deleted.removed, "storage": objects.describe()}

    def human() -> None:
        for prefix, count in deleted.prefixes.items():
            if count:
                print(f"removed {count} object(s) under {prefix}")
        if deleted.local_dir:
            print(f"removed {deleted.local_dir}")
        print(f"deleted thread {thread.thread_id} from {objects.describe()}", file=sys.stderr)

    _emit(args, payload, human)
    return EXIT_OK


def cmd_state(args: argparse.Namespace) -> int:
    config = _config(args)
    thread = _thread(config, args.thread)
    store = thread_store(config)
    if not store.exists(thread):
        raise BadInput(f"unknown thread {thread.thread_id}: nothing has been committed for it")
    snapshot = store.load(thread)
    state = snapshot.state.model_dump(mode="json", exclude={"messages"})
    messages = [_message_payload(m) for m in snapshot.state.messages]
    payload = {"thread_id": thread.thread_id, "version": snapshot.version, "messages": messages, **state}

    def human() -> None:
        print(f"thread {thread.thread_id} · version {snapshot.version} · {len(messages)} message(s)")
        for m in messages:
            hidden = " (hidden)" if m["additional_kwargs"].get("hide_from_ui") else ""
            name = f" {m['name']}" if m.get("name") else ""
            print(f"\n[{m['type']}{name}{hidden}] {m['text']}")
            for call in m.get("tool_calls") or []:
                print(f"  → {call['name']}({json.dumps(call['args'], ensure_ascii=False)})")
        for key, value in state.items():
            if value not in (None, [], {}):
                print(f"\n{key}: {json.dumps(value, ensure_ascii=False)}")

    _emit(args, payload, human)
    return EXIT_OK


def _message_payload(message: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "id": message.id,
        "type": message.type,
        "name": message.name,
        "content": message.content,
        "text": message_text(message),
        "additional_kwargs": message.additional_kwargs,
    }
    if message.type == "ai":
        payload["tool_calls"] = message.tool_calls
        payload["usage_metadata"] = message.usage_metadata
        payload["response_metadata"] = message.response_metadata
    if message.type == "tool":
        payload.update(tool_call_id=message.tool_call_id, status=message.status, artifact=message.artifact)
    return payload


async def cmd_worker(args: argparse.Namespace) -> int:
    config = _config(args)
    async with Stack(config, need_worker=False, ui=False, quiet=True, serve_metrics=True) as stack:
        await ensure_search_attributes(stack.client, config.temporal.namespace)
        await ensure_sweeper_schedule(stack.client, config)
        worker = build_worker(stack.client, config)
        where = stack.server.address if stack.server else config.temporal.address or "the local dev server"
        print(
            f"worker polling task queue '{config.temporal.task_queue}' on {where} (Ctrl-C to stop)",
            file=sys.stderr,
        )
        await _run_until_signalled(worker.run(), worker.shutdown)
    return EXIT_OK


async def cmd_dev(args: argparse.Namespace) -> int:
    config = _config(args, **({"telemetry": {"traces": "console"}} if args.trace else {}))
    if config.temporal.address:
        raise BadInput("hartflow dev starts its own server; unset TEMPORAL_ADDRESS / temporal.address")
    async with Stack(config, need_worker=False, serve_metrics=True) as stack:
        if not stack.embedded:
            raise BadInput(f"something already listens on 127.0.0.1:{config.temporal.embedded_port}")
        worker = build_worker(stack.client, config)
        print(f"Temporal dev server on {stack.server.address if stack.server else '?'}", file=sys.stderr)
        print(f"Web UI: {stack.ui_base}", flush=True)
        print("Ctrl-C to stop.", file=sys.stderr, flush=True)
        await _run_until_signalled(worker.run(), worker.shutdown)
    return EXIT_OK


async def _run_until_signalled(
    work: Coroutine[Any, Any, None], shutdown: Callable[[], Coroutine[Any, Any, None]]
) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    task = asyncio.create_task(work)
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if not task.done():
        await shutdown()
    stopper.cancel()
    await task


async def cmd_sandboxes(args: argparse.Namespace) -> int:
    config = _config(args)
    if config.sandbox.provider != "kubernetes":
        raise BadInput("sandbox.provider is 'local': its sandboxes are thread folders, there are no pods to manage")
    settings = config.sandbox.kubernetes
    async with Stack(config, need_worker=args.action == "sweep", ui=False, quiet=args.json) as stack:
        if args.action == "list":
            return await _list_sandboxes(args, config, stack.client)
        result = await stack.client.execute_workflow(
            SandboxSweeperWorkflow.run,
            SweepInput(max_age_seconds=args.max_age or settings.max_age_seconds, dry_run=args.dry_run),
            id=f"hartflow-sandbox-sweep-{uuid.uuid4().hex[:12]}",
            task_queue=config.temporal.task_queue,
            result_type=SweepResult,
        )
    verb = "would delete" if result.dry_run else "deleted"

    def human() -> None:
        for swept in result.deleted:
            print(f"{verb} {swept.pod} (thread {swept.thread_id}): {swept.reason}")
        print(f"examined {result.examined} sandbox pod(s), {verb} {len(result.deleted)}", file=sys.stderr)

    _emit(args, asdict(result), human)
    return EXIT_OK


async def _list_sandboxes(args: argparse.Namespace, config: HartflowConfig, client: Client) -> int:
    provider = KubernetesSandboxProvider(config.sandbox.kubernetes, bash_timeout=config.sandbox.bash_timeout_seconds)
    records = await asyncio.to_thread(provider.inventory)
    owners = {record.pod: run_workflow_id(record) for record in records}
    states = {owner: await run_state(client, owner) for owner in set(owners.values()) if owner}
    now = datetime.now(UTC)
    rows = [
        {
            **asdict(record),
            "run_workflow_id": owners[record.pod],
            "run_state": states.get(owners[record.pod], "unknown"),
            "age_seconds": (now - record.created_at).total_seconds() if record.created_at else None,
        }
        for record in records
    ]

    def human() -> None:
        if not rows:
            print(f"no sandbox pods in namespace {config.sandbox.kubernetes.namespace}", file=sys.stderr)
            return
        print(f"{'POD':<26} {'THREAD':<24} {'RUN':<8} {'READY':<6} AGE")
        for row in rows:
            age = _age(row["age_seconds"])
            print(f"{row['pod']:<26} {row['thread_id']:<24} {row['run_state']:<8} {row['ready']!s:<6} {age}")

    _emit(args, {"namespace": config.sandbox.kubernetes.namespace, "sandboxes": rows}, human)
    return EXIT_OK


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def cmd_skills(args: argparse.Namespace) -> int:
    config = _config(args)
    settings = config.skills
    root = settings.root(config.home)
    rows = [
        {
            "name": skill.name,
            "description": skill.description,
            "category": skill.category,
            "enabled": skill.enabled,
            "path": skill.container_file(settings.container_path),
            "file": str(skill.skill_file),
        }
        for skill in load_skills(root, settings.disabled)
    ]

    def human() -> None:
        if not rows:
            print(f"no skills in {root} (add public/<name>/SKILL.md or custom/<name>/SKILL.md)", file=sys.stderr)
            return
        for row in rows:
            state = "" if row["enabled"] else " (disabled)"
            print(f"/{row['name']:<24} {row['category']:<7} {row['description']}{state}")

    _emit(args, {"root": str(root), "skills": rows}, human)
    return EXIT_OK


async def cmd_serve(args: argparse.Namespace) -> int:
    from workers.api.auth import unsafe_bind_problem
    from workers.api.server import serve

    config = _config(args)
    problem = unsafe_bind_problem(config.api, args.host)
    if problem is not None:
        raise BadInput(problem)
    if not 0 <= args.port <= 65535:
        raise BadInput(f"--port {args.port} is not a TCP port")
    async with Stack(config, quiet=True, ui=False) as stack:
        await serve(config, stack.client, args.host, args.port)
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from workers.demo import run_demo

    return run_demo(args)


# -- entry point --------------------------------------------------------------------------------------------


_EVENTS_HELP = "stream progress events as JSON lines on stdout; the last line is the result (kind: result)"


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="FILE", help="hartflow.yaml to use (default: ./hartflow.yaml)")
    common.add_argument("--json", action="store_true", help="machine-readable output")

    parser = argparse.ArgumentParser(
        prog="hartflow", description="DeerFlow's agent middleware pipeline as durable Temporal workflows."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", parents=[common], help="start a run on a thread and follow it")
    run.add_argument("message", help="the user message")
    run.add_argument("--thread", metavar="ID", help="thread id (default: a new thread)")
    run.add_argument("--model", metavar="SPEC", help="scripted:PATH or openai:MODEL")
    run.add_argument("--plan-mode", action="store_true", help="enable plan mode (todo list)")
    run.add_argument("--detach", action="store_true", help="start the run and return at once")
    run.add_argument(
        "--file", action="append", metavar="PATH", help="attach a file: copied into the thread's uploads (repeatable)"
    )
    run.add_argument("--events", action="store_true", help=_EVENTS_HELP)
    run.set_defaults(handler=cmd_run)

    upload = sub.add_parser("upload", parents=[common], help="copy files into a thread's uploads folder")
    upload.add_argument("thread", metavar="THREAD")
    upload.add_argument("files", nargs="+", metavar="FILE")
    upload.set_defaults(handler=cmd_upload)

    reply = sub.add_parser("reply", parents=[common], help="answer a run that waits for input")
    reply.add_argument("thread", metavar="THREAD")
    reply.add_argument("answer", nargs="?", default="", metavar="ANSWER")
    reply.add_argument("--option", metavar="N", help="choose offered option N (1-based) or an option id")
    reply.add_argument("--field", action="append", metavar="NAME=VALUE", help="fill a form field (repeatable)")
    reply.add_argument("--signal", action="store_true", help="send a signal instead of a validated update")
    reply.add_argument("--events", action="store_true", help=_EVENTS_HELP)
    reply.set_defaults(handler=cmd_reply)

    runs = sub.add_parser("runs", parents=[common], help="list runs (the Temporal visibility API)")
    runs.add_argument("--status", choices=list(get_args(RunStatus)), help="only runs in this status")
    runs.add_argument("--thread", metavar="ID", help="only runs of this thread")
    runs.add_argument("--limit", type=int, default=50, metavar="N", help="at most N runs, newest first (default 50)")
    runs.set_defaults(handler=cmd_runs)

    events = sub.add_parser(
        "events", parents=[common], help="print a thread's progress events as JSON lines (resume with --from)"
    )
    events.add_argument("thread", metavar="THREAD")
    events.add_argument(
        "--from", dest="start", type=int, default=0, metavar="SEQ", help="start at this event (default 0)"
    )
    events.add_argument("--follow", action="store_true", help="keep following until the run pauses or ends")
    events.set_defaults(handler=cmd_events)

    for name, handler, text in (
        ("status", cmd_status, "show the thread's current or last run"),
        ("state", cmd_state, "print the thread's committed state"),
        ("cancel", cmd_cancel, "cancel the thread's active run"),
    ):
        command = sub.add_parser(name, parents=[common], help=text)
        command.add_argument("thread", metavar="THREAD")
        command.set_defaults(handler=handler)

    worker = sub.add_parser("worker", parents=[common], help="run a worker against TEMPORAL_ADDRESS")
    worker.set_defaults(handler=cmd_worker)
    dev = sub.add_parser("dev", parents=[common], help="run the embedded stack in the foreground")
    dev.add_argument("--trace", action="store_true", help="print every span to stderr (telemetry.traces: console)")
    dev.set_defaults(handler=cmd_dev)
    serve = sub.add_parser("serve", parents=[common], help="serve the LangGraph Agent Server API over HTTP")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=2024, help="port to bind (default 2024)")
    serve.set_defaults(handler=cmd_serve)
    demo = sub.add_parser("demo", parents=[common], help="a scripted run: tools, a pause, the reply")
    demo.set_defaults(handler=cmd_demo)

    sandboxes = sub.add_parser("sandboxes", parents=[common], help="Kubernetes sandbox pods: list them, sweep orphans")
    sandboxes.add_argument("action", choices=["list", "sweep"])
    sandboxes.add_argument(
        "--max-age", type=float, metavar="SECONDS", help="sweep older pods (default: kubernetes.max_age_seconds)"
    )
    sandboxes.add_argument("--dry-run", action="store_true", help="sweep: report what would go, delete nothing")
    sandboxes.set_defaults(handler=cmd_sandboxes)

    threads = sub.add_parser("threads", parents=[common], help="the threads in storage: list them, delete one")
    threads.add_argument("action", choices=["list", "delete"])
    threads.add_argument("thread", nargs="?", metavar="THREAD", help="delete: the thread to delete")
    threads.add_argument("--yes", action="store_true", help="delete: yes, remove its state and files for good")
    threads.set_defaults(handler=cmd_threads)

    skills = sub.add_parser("skills", parents=[common], help="the skills users can activate with /skill-name")
    skills.add_argument("action", choices=["list"])
    skills.set_defaults(handler=cmd_skills)
    return parser


def run_command(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = args.handler(args)
        if asyncio.iscoroutine(result):
            return int(asyncio.run(result))
        return int(result)
    except (BadInput, ConfigError, StorageConfigError) as exc:
        _fail(args, str(exc))
        return EXIT_BAD_INPUT
    except (DevServerError, TemporalCliNotFound) as exc:
        _fail(args, f"cannot start the embedded Temporal server: {exc}")
        return EXIT_FAILED
    except StorageError as exc:
        _fail(args, f"storage unavailable: {exc}")
        return EXIT_FAILED
    except TemporalUnreachable as exc:
        _fail(args, str(exc))
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted; runs are durable — see them again with: hartflow status THREAD", file=sys.stderr)
        return 130
    finally:
        telemetry.flush()


def _fail(args: argparse.Namespace, message: str) -> None:
    line = message.splitlines()[0] if message else "error"
    if getattr(args, "json", False) or getattr(args, "events", False):
        print(json.dumps({"error": line}))
    print(f"hartflow: error: {line}", file=sys.stderr)


def main(argv: list[str] | None = None) -> NoReturn:
    hard_exit(run_command(argv))


if __name__ == "__main__":
    main()
