"""Tool approvals from the command line: ``hartflow approve THREAD [--call ID] [--edit ARGS.json]``, ``hartflow
reject THREAD --reason "…"`` (the run's validated ``review`` update, as the config's user: the audit's reviewer), and
``hartflow runs --awaiting approval``: every pending approval of the config's user across threads, found by the
``HartflowStatus = "awaiting_approval"`` search attribute and read from the committed state (no worker needed).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vocabulary.approvals import ReviewInput, args_summary, is_approval
from vocabulary.contracts import ThreadRef
from workers import progress
from workers.cli._common import BadInput, config_of, emit, thread_of
from workers.cli._follow import follow_to_end, waiting_run
from workers.client.reader import first_run_id
from workers.client.runs import ReplyRefused, Runs
from workers.config import HartflowConfig
from workers.stack import Stack
from workers.worker import thread_store
from workflows import search_attributes as sa


async def cmd_approve(args: argparse.Namespace) -> int:
    if args.edit is None:
        return await _decide(args, {"type": "approve"})
    return await _decide(args, {"type": "edit", "edited_action": {"args": _edited_args(Path(args.edit))}})


async def cmd_reject(args: argparse.Namespace) -> int:
    return await _decide(args, {"type": "reject", "message": args.reason} if args.reason else {"type": "reject"})


def _edited_args(path: Path) -> dict[str, Any]:
    try:
        edited = json.loads(path.expanduser().read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"--edit {path}: {exc}") from None
    if not isinstance(edited, dict):
        raise BadInput(f"--edit {path}: the file must hold the call's arguments as a JSON object")
    return edited


async def _decide(args: argparse.Namespace, decision: dict[str, Any]) -> int:
    config = config_of(args)
    thread = thread_of(config, args.thread)
    async with Stack(config, quiet=args.json) as stack:
        workflow_id, handle, pending = await waiting_run(stack.client, thread)
        if not is_approval(pending):
            raise BadInput("the run is not waiting for a tool approval")
        assert isinstance(pending, dict)
        waiting: list[str] = pending["tool_call_ids"]
        if args.call is not None and args.call not in waiting:
            raise BadInput(f"unknown call {args.call!r}; waiting: {', '.join(waiting)}")
        call_ids = [args.call] if args.call else list(waiting)
        if decision["type"] == "edit":
            if len(call_ids) != 1:
                raise BadInput(f"--edit changes one call: name it with --call ({', '.join(call_ids)})")
            decision["edited_action"]["name"] = pending["action_requests"][waiting.index(call_ids[0])]["name"]
        review = ReviewInput([decision] * len(call_ids), pending.get("request_id"), call_ids, config.user_id)
        seen = await progress.stream_offset(stack.client, workflow_id)
        try:
            await Runs(stack.client, config.temporal.task_queue).review(workflow_id, review, run_id=handle.run_id)
        except ReplyRefused as exc:
            raise BadInput(f"decision refused: {exc}") from None
        first = first_run_id(await handle.describe())
        return await follow_to_end(args, stack, thread.thread_id, workflow_id, first, offset=seen)


async def list_awaiting_approval(args: argparse.Namespace, config: HartflowConfig, query: str) -> int:
    """``hartflow runs --awaiting approval``: one row per pending approval of the config's user."""
    query += f' AND {sa.STATUS.name} = "awaiting_approval"'
    store = thread_store(config)
    rows: list[dict[str, Any]] = []
    async with Stack(config, need_worker=False, ui=False, quiet=args.json) as stack:
        async for execution in stack.client.list_workflows(query, limit=args.limit):
            thread = ThreadRef(config.user_id, execution.typed_search_attributes.get(sa.THREAD_ID) or "")
            rows.extend(_rows(store.load(thread).state.approvals, thread.thread_id, execution.id))

    def human() -> None:
        if not rows:
            print("no approvals are pending", file=sys.stderr)
            return
        print(f"{'THREAD':<28} {'CALL':<16} {'TOOL':<16} {'AGE':>8}  {'DEADLINE':<20} ARGS")
        for row in rows:
            deadline = row["deadline"][:19].replace("T", " ")
            print(
                f"{row['thread_id']:<28} {row['call_id']:<16} {row['tool']:<16} {row['age_seconds']:>7}s  "
                f"{deadline:<20} {row['args']}"
            )

    emit(args, {"query": query, "approvals": rows}, human)
    return 0


def _rows(records: list[dict[str, Any]], thread_id: str, workflow_id: str) -> list[dict[str, Any]]:
    now = datetime.now(UTC)
    rows = []
    for record in records:
        if record.get("status") != "pending":
            continue
        age = int((now - datetime.fromisoformat(record["requested_at"])).total_seconds())
        for call_id, action in zip(record["tool_call_ids"], record["action_requests"], strict=True):
            rows.append(
                {
                    "thread_id": thread_id,
                    "workflow_id": workflow_id,
                    "request_id": record["request_id"],
                    "call_id": call_id,
                    "tool": action["name"],
                    "args": args_summary(action["args"]),
                    "age_seconds": age,
                    "requested_at": record["requested_at"],
                    "deadline": record["deadline"],
                }
            )
    return rows
