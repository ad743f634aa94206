"""Shared by every command: the exit codes, the refusal of bad input, and the one way to show a result.

Exit codes (a contract): 0 completed, 3 awaiting input or approval, 1 failed or cancelled, 2 bad input (nothing
written). Every command takes ``--json`` for machines; without it the output is for people: :func:`emit` picks.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from activities.paths import InvalidIdError, validate_thread_id, validate_user_id
from vocabulary.approvals import approval_markdown
from vocabulary.contracts import ThreadRef
from workers import progress
from workers.config import HartflowConfig, load_config
from workers.stack import Stack
from workflows.run import RunView

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_AWAITING = 0, 1, 2, 3


class BadInput(Exception):
    """Refused before anything was written; exit 2 with this one-line message."""


def config_of(args: argparse.Namespace, **overrides: Any) -> HartflowConfig:
    return load_config(Path(args.config) if args.config else None, overrides=overrides)


def thread_of(config: HartflowConfig, thread_id: str) -> ThreadRef:
    try:
        return ThreadRef(validate_user_id(config.user_id), validate_thread_id(thread_id))
    except InvalidIdError as exc:
        raise BadInput(str(exc)) from None


def exit_code(status: str) -> int:
    return {"completed": EXIT_OK, "awaiting_input": EXIT_AWAITING, "awaiting_approval": EXIT_AWAITING}.get(
        status, EXIT_FAILED
    )


def emit(args: argparse.Namespace, payload: dict[str, Any], human: Callable[[], None]) -> None:
    if getattr(args, "events", False):
        # The last line of an --events stream: the run as --json shows it, marked so a reader knows it is the end.
        print(json.dumps({"kind": "result", **payload}, ensure_ascii=False, default=str))
    elif args.json:
        print(json.dumps(payload, ensure_ascii=False, default=str))
    else:
        human()


def emit_view(
    args: argparse.Namespace, view: RunView, stack: Stack, workflow_id: str, *, shown: str | None = None
) -> None:
    """Show a run's view: its fields with the Web UI link (``--json``), or the answer or question for people
    (``shown``: the answer's text already printed while it was generated)."""
    emit(args, view_payload(view, stack), lambda: print_view(view, stack.ui_url(workflow_id, view.run_id), shown))


def view_payload(view: RunView, stack: Stack | None) -> dict[str, Any]:
    payload = asdict(view)
    payload["ui_url"] = stack.ui_url(view.workflow_id, view.run_id) if stack else None
    return payload


def print_view(view: RunView, ui_url: str | None, shown: str | None = None) -> None:
    if view.status == "awaiting_input" and view.pending_input:
        request = view.pending_input
        print(f"\n{request.get('question', '')}")
        for index, option in enumerate(request.get("options") or [], 1):
            print(f"  {index}. {option['label']}")
        print(f"\nThe run is waiting. Answer with: hartflow reply {view.thread_id} 'your answer'")
    elif view.status == "awaiting_approval" and view.pending_input:
        for line in approval_markdown(view.pending_input)[1:-1]:
            print(line)
        print(f"\nThe run waits for approval: hartflow approve {view.thread_id} | hartflow reject {view.thread_id}")
    elif view.final_message and view.final_message.strip() != (shown or "").strip():
        print(view.final_message)
    line = f"[{view.status}] thread {view.thread_id} · run {view.run_id} · {view.turns} turn(s)"
    if view.stop_reason:
        line += f" · stop reason {view.stop_reason}"
    print(line, file=sys.stderr)
    if ui_url:
        print(f"Web UI: {ui_url}", file=sys.stderr)


def progress_of(args: argparse.Namespace) -> Callable[[progress.Event], None] | None:
    """How this command shows progress: JSON lines (``--events``), lines for people, or not at all (``--json``)."""
    if args.events:
        return progress.json_lines()
    return None if args.json else progress.ProgressPrinter()
