"""The commands that look at runs and threads: ``status``, ``state``, ``events`` and ``runs``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from temporalio.client import WorkflowExecution, WorkflowExecutionStatus, WorkflowQueryRejectedError

from activities.paths import InvalidIdError, validate_user_id
from activities.thread_files import ThreadFiles
from middlewares.deerflow_chain import deerflow_chain
from vocabulary.messages import message_text
from vocabulary.text import model_label
from workers import progress
from workers.cli._common import EXIT_OK, BadInput, config_of, emit, print_view, thread_of, view_payload
from workers.cli._follow import archived_events, reader_of, started_thread
from workers.cli.approvals import list_awaiting_approval
from workers.client.reader import first_run_id
from workers.config import HartflowConfig, open_object_store
from workers.stack import Stack
from workers.worker import thread_store
from workflows import search_attributes as sa
from workflows.run import WORKFLOW_NAME


async def cmd_status(args: argparse.Namespace) -> int:
    config = config_of(args)
    thread = thread_of(config, args.thread)
    async with Stack(config, quiet=args.json) as stack:
        workflow_id, _ = await started_thread(stack.client, thread)
        view = await reader_of(stack).view(thread.thread_id, workflow_id)
        # Beside the run's chain, DeerFlow's for the same settings: what hartflow runs of it, and what not (why).
        payload = {**view_payload(view, stack), "deerflow_chain": deerflow_chain(view.chain)}

        def human() -> None:
            print_view(view, stack.ui_url(workflow_id, view.run_id))
            for entry in payload["deerflow_chain"]:
                deerflow = entry["deerflow"] or f"({entry['note']})"
                print(f"  {deerflow}: {entry['hartflow']}", file=sys.stderr)

        emit(args, payload, human)
        return EXIT_OK


def cmd_state(args: argparse.Namespace) -> int:
    config = config_of(args)
    thread = thread_of(config, args.thread)
    store = thread_store(config)
    if not store.exists(thread):
        raise BadInput(f"unknown thread {thread.thread_id}: nothing has been committed for it")
    snapshot = store.load(thread)
    state = snapshot.state.model_dump(mode="json", exclude={"messages"})
    messages = [_message_payload(m) for m in snapshot.state.messages]
    files = ThreadFiles(open_object_store(config), config.home)
    outputs = [{"path": path, "size": size} for path, size in files.listing(thread, "outputs")]
    payload = {"thread_id": thread.thread_id, "version": snapshot.version, "messages": messages, **state}
    payload["outputs"] = outputs  # the files the thread's runs left in outputs/: in storage, not in any sandbox

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
        if outputs:
            print("\noutputs:")
            for output in outputs:
                print(f"  {output['path']} ({output['size']} bytes)")

    emit(args, payload, human)
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


async def cmd_events(args: argparse.Namespace) -> int:
    config = config_of(args)
    thread = thread_of(config, args.thread)
    async with Stack(config, ui=False, quiet=True) as stack:
        workflow_id, description = await started_thread(stack.client, thread)
        reader = reader_of(stack)
        show = progress.json_lines()
        until: int | None = None
        if description.status == WorkflowExecutionStatus.RUNNING and not args.follow:
            try:
                until = await progress.stream_offset(stack.client, workflow_id)
            except WorkflowQueryRejectedError:
                description = await stack.client.get_workflow_handle(workflow_id).describe()  # closed meanwhile
        if description.status == WorkflowExecutionStatus.RUNNING:
            archived = archived_events(reader, thread.thread_id, workflow_id)
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


async def cmd_runs(args: argparse.Namespace) -> int:
    config = config_of(args)
    awaiting = getattr(args, "awaiting", None)
    query = _runs_query(config, "awaiting_input" if awaiting == "input" else args.status, args.thread)
    if awaiting == "approval":
        return await list_awaiting_approval(args, config, query)
    async with Stack(config, need_worker=False, ui=False, quiet=args.json) as stack:
        rows = [run_row(execution) async for execution in stack.client.list_workflows(query, limit=args.limit)]

    def human() -> None:
        if not rows:
            print("no runs match", file=sys.stderr)
            return
        print(f"{'THREAD':<28} {'STATUS':<15} {'TURNS':>5}  {'STARTED':<20} {'MODEL':<28} STOP REASON")
        for row in rows:
            started = row["started_at"][:19].replace("T", " ") if row["started_at"] else "?"
            print(
                f"{row['thread_id']:<28} {row['status']:<15} {row['turns']:>5}  {started:<20} "
                f"{model_label(row['model']):<28} {row['stop_reason'] or ''}"
            )

    emit(args, {"query": query, "runs": rows}, human)
    return EXIT_OK


def _runs_query(config: HartflowConfig, status: str | None, thread: str | None) -> str:
    """A visibility query over the config's user's hartflow runs (as ``threads list`` lists only his threads:
    another user's thread ids, statuses and models are his); ids are validated first, so they cannot break out
    of the quotes."""
    try:
        user_id = validate_user_id(config.user_id)
    except InvalidIdError as exc:
        raise BadInput(str(exc)) from None
    clauses = [
        f'WorkflowType = "{WORKFLOW_NAME}"',
        'ExecutionStatus != "ContinuedAsNew"',
        f'{sa.USER_ID.name} = "{user_id}"',
    ]
    if status:
        clauses.append(f'{sa.STATUS.name} = "{status}"')
    if thread:
        clauses.append(f'{sa.THREAD_ID.name} = "{thread_of(config, thread).thread_id}"')
    return " AND ".join(clauses)


def run_row(execution: WorkflowExecution) -> dict[str, Any]:
    attributes = execution.typed_search_attributes
    status = attributes.get(sa.STATUS) or "running"
    if execution.status not in (None, WorkflowExecutionStatus.RUNNING) and status in (
        "running",
        "awaiting_input",
        "awaiting_approval",
    ):
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
