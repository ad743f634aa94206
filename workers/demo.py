"""``hartflow demo``: the durability story in three processes.

1. ``hartflow run`` — a scripted model writes a file and runs bash in the sandbox (two tool calls in
   parallel), then asks a clarification question. The run pauses, its state is committed, and the command
   exits: the embedded Temporal server and the worker stop with it.
2. ``hartflow reply`` — a *new* process restarts the server on the same SQLite file; its worker replays the
   run from history, the answer arrives as an update, and the same run goes on to finish.
3. ``hartflow state`` — the committed transcript, read back from the thread store.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

from vocabulary.workflow_ids import run_workflow_id
from workers.config import load_config

HAIKU = "Histories replay,\nworkers fall and rise again —\nthe river runs on."

SCRIPT: dict[str, Any] = {
    "responses": [
        {
            "content": "I'll jot down the brief and look at the workspace.",
            "tool_calls": [
                {
                    "name": "write_file",
                    "args": {
                        "description": "save the brief",
                        "path": "/mnt/user-data/workspace/brief.md",
                        "content": "Write a haiku about durable execution.\n",
                    },
                    "id": "call_brief",
                },
                {
                    "name": "bash",
                    "args": {
                        "description": "inspect the workspace",
                        "command": "ls /mnt/user-data && date -u +%F",
                    },
                    "id": "call_ls",
                },
            ],
            "usage_metadata": {"input_tokens": 410, "output_tokens": 62, "total_tokens": 472},
            "response_metadata": {"finish_reason": "tool_calls"},
        },
        {
            "content": "",
            "tool_calls": [
                {
                    "name": "ask_clarification",
                    "args": {
                        "question": "Which image should the haiku be built around?",
                        "clarification_type": "approach_choice",
                        "context": "A haiku works best around one concrete image.",
                        "options": ["a river", "a mountain", "the tide"],
                    },
                    "id": "call_ask",
                }
            ],
            "usage_metadata": {"input_tokens": 530, "output_tokens": 40, "total_tokens": 570},
            "response_metadata": {"finish_reason": "tool_calls"},
        },
        {
            "content": "A river it is.",
            "tool_calls": [
                {
                    "name": "write_file",
                    "args": {
                        "description": "deliver the haiku",
                        "path": "/mnt/user-data/outputs/haiku.md",
                        "content": HAIKU + "\n",
                    },
                    "id": "call_haiku",
                }
            ],
            "usage_metadata": {"input_tokens": 640, "output_tokens": 48, "total_tokens": 688},
            "response_metadata": {"finish_reason": "tool_calls"},
        },
        {
            "content": f"Here is your haiku (saved to /mnt/user-data/outputs/haiku.md):\n\n{HAIKU}",
            "usage_metadata": {"input_tokens": 700, "output_tokens": 30, "total_tokens": 730},
            "response_metadata": {"finish_reason": "stop"},
        },
    ]
}


def run_demo(args: argparse.Namespace) -> int:
    base = load_config(Path(args.config) if args.config else None)
    demo_dir = base.home / "demo"
    demo_dir.mkdir(parents=True, exist_ok=True)
    script = demo_dir / "script.json"
    script.write_text(json.dumps(SCRIPT, indent=2), encoding="utf-8")
    config_file = demo_dir / "hartflow.yaml"
    config_file.write_text(
        "\n".join(
            [
                "# Written by `hartflow demo`: the scripted model, and host bash allowed for the local sandbox.",
                f"model: scripted:{script}",
                "storage:",
                f"  home: {base.home}",
                "sandbox:",
                "  allow_host_bash: true",
                "temporal:",
                f"  embedded_port: {base.temporal.embedded_port}",
                *([f"  address: {base.temporal.address}"] if base.temporal.address else []),
                "",
            ]
        ),
        encoding="utf-8",
    )
    thread = f"demo-{uuid.uuid4().hex[:8]}"
    cli = [sys.executable, "-m", "workers.cli"]
    conf = ["--config", str(config_file)]

    _say(f"1/3  hartflow run … --thread {thread}   (a new process: server + worker start, the run begins)")
    code = _step([*cli, "run", "Write a haiku about durable execution.", "--thread", thread, *conf])
    if code != 3:
        return _abort(f"expected the run to pause for clarification (exit 3), got exit {code}")

    _say("The run is paused and that process has exited — the Temporal server and worker with it.")
    _say(f"2/3  hartflow reply {thread} --option 1   (a second process: the server restarts on the same file,")
    _say("     the worker replays the run from history, and the same run continues)")
    code = _step([*cli, "reply", thread, "--option", "1", *conf])
    if code != 0:
        return _abort(f"expected the run to complete after the reply (exit 0), got exit {code}")

    _say(f"3/3  hartflow state {thread}   (the committed thread state)")
    code = _step([*cli, "state", thread, *conf])
    if code != 0:
        return _abort(f"could not read the thread state (exit {code})")

    ui_port = base.temporal.embedded_ui_port or base.temporal.embedded_port + 1000
    workflow = quote(run_workflow_id(base.user_id, thread), safe="")
    _say(
        "Inspect the run in the Temporal Web UI: start `hartflow dev`, then open\n"
        f"     http://127.0.0.1:{ui_port}/namespaces/{base.temporal.namespace}/workflows/{workflow}"
    )
    return 0


def _step(command: list[str]) -> int:
    return subprocess.call(command, stdin=subprocess.DEVNULL)


def _say(text: str) -> None:
    print(f"\n» {text}", flush=True)


def _abort(reason: str) -> int:
    print(f"hartflow demo: {reason}", file=sys.stderr)
    return 1
