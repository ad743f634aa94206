"""The ``hartflow`` argument parser, built from one table: each command's name, handler, help and arguments."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, get_args

from workers.cli.approvals import cmd_approve, cmd_reject
from workers.cli.inspection import cmd_events, cmd_runs, cmd_state, cmd_status
from workers.cli.memory import cmd_memory
from workers.cli.processes import cmd_demo, cmd_dev, cmd_sandboxes, cmd_serve, cmd_worker
from workers.cli.runs import cmd_cancel, cmd_reply, cmd_run
from workers.cli.schedules import cmd_schedule
from workers.cli.settings import cmd_agents, cmd_mcp
from workers.cli.skills import cmd_skills
from workers.cli.threads import cmd_threads, cmd_tools, cmd_upload
from workflows.run import RunStatus


@dataclass(frozen=True)
class Arg:
    """One ``add_argument`` call: its flags (or positional name) and its keyword options."""

    flags: tuple[str, ...]
    options: dict[str, Any]


def arg(*flags: str, **options: Any) -> Arg:
    return Arg(flags, options)


@dataclass(frozen=True)
class Command:
    name: str
    handler: Callable[[argparse.Namespace], Any]
    help: str
    args: tuple[Arg, ...] = field(default=())


_EVENTS_HELP = "stream progress events as JSON lines on stdout; the last line is the result (kind: result)"
_THREAD = arg("thread", metavar="THREAD")
_EVENTS = arg("--events", action="store_true", help=_EVENTS_HELP)
_CALL = arg("--call", metavar="ID", help="only this tool call (default: every call waiting)")

COMMANDS: tuple[Command, ...] = (
    Command(
        "run",
        cmd_run,
        "start a run on a thread and follow it",
        (
            arg("message", help="the user message"),
            arg("--thread", metavar="ID", help="thread id (default: a new thread)"),
            arg("--model", metavar="NAME", help="a name from models, or scripted:PATH / openai:MODEL"),
            arg("--plan-mode", action="store_true", help="enable plan mode (todo list)"),
            arg("--detach", action="store_true", help="start the run and return at once"),
            arg(
                "--file",
                action="append",
                metavar="PATH",
                help="attach a file: copied into the thread's uploads (repeatable)",
            ),
            arg("--webhook", metavar="URL", help="POST the run's final view here when it ends (webhooks.default_url)"),
            arg(
                "--if-busy",
                choices=("reject", "enqueue", "interrupt"),
                default="reject",
                help="a run going on the thread: refuse (default), run after it (enqueue), cancel it first (interrupt)",
            ),
            _EVENTS,
        ),
    ),
    Command(
        "upload",
        cmd_upload,
        "copy files into a thread's uploads folder",
        (_THREAD, arg("files", nargs="+", metavar="FILE")),
    ),
    Command(
        "reply",
        cmd_reply,
        "answer a run that waits for input",
        (
            _THREAD,
            arg("answer", nargs="?", default="", metavar="ANSWER"),
            arg("--option", metavar="N", help="choose offered option N (1-based) or an option id"),
            arg("--field", action="append", metavar="NAME=VALUE", help="fill a form field (repeatable)"),
            arg("--signal", action="store_true", help="send a signal instead of a validated update"),
            _EVENTS,
        ),
    ),
    Command(
        "approve",
        cmd_approve,
        "approve the tool calls a run waits on (or one, or run it with edited arguments)",
        (
            _THREAD,
            _CALL,
            arg("--edit", metavar="ARGS.json", help="run the call with these arguments instead (a JSON object)"),
            _EVENTS,
        ),
    ),
    Command(
        "reject",
        cmd_reject,
        "reject the tool calls a run waits on: the model reads the reason",
        (
            _THREAD,
            _CALL,
            arg("--reason", metavar="TEXT", help="what the model is told"),
            _EVENTS,
        ),
    ),
    Command(
        "runs",
        cmd_runs,
        "list your runs (the config's user_id; the Temporal visibility API)",
        (
            arg("--status", choices=list(get_args(RunStatus)), help="only runs in this status"),
            arg(
                "--awaiting",
                choices=["approval", "input"],
                help="approval: every pending tool approval (tool, args, age, deadline); input: runs awaiting input",
            ),
            arg("--thread", metavar="ID", help="only runs of this thread"),
            arg("--limit", type=int, default=50, metavar="N", help="at most N runs, newest first (default 50)"),
        ),
    ),
    Command(
        "events",
        cmd_events,
        "print a thread's progress events as JSON lines (resume with --from)",
        (
            _THREAD,
            arg("--from", dest="start", type=int, default=0, metavar="SEQ", help="start at this event (default 0)"),
            arg("--follow", action="store_true", help="keep following until the run pauses or ends"),
        ),
    ),
    Command("status", cmd_status, "show the thread's current or last run", (_THREAD,)),
    Command("state", cmd_state, "print the thread's committed state", (_THREAD,)),
    Command("cancel", cmd_cancel, "cancel the thread's active run", (_THREAD,)),
    Command("worker", cmd_worker, "run a worker against TEMPORAL_ADDRESS"),
    Command(
        "dev",
        cmd_dev,
        "run the embedded stack in the foreground",
        (arg("--trace", action="store_true", help="print every span to stderr (telemetry.traces: console)"),),
    ),
    Command(
        "serve",
        cmd_serve,
        "serve the LangGraph Agent Server API over HTTP",
        (
            arg("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)"),
            arg("--port", type=int, default=2024, help="port to bind (default 2024)"),
        ),
    ),
    Command("demo", cmd_demo, "a scripted run: tools, a pause, the reply"),
    Command(
        "sandboxes",
        cmd_sandboxes,
        "Kubernetes sandbox pods: list them, sweep orphans",
        (
            arg("action", choices=["list", "sweep"]),
            arg(
                "--max-age",
                type=float,
                metavar="SECONDS",
                help="sweep older pods (default: kubernetes.max_age_seconds)",
            ),
            arg("--dry-run", action="store_true", help="sweep: report what would go, delete nothing"),
        ),
    ),
    Command(
        "threads",
        cmd_threads,
        "the threads in storage: list them, delete one",
        (
            arg("action", choices=["list", "delete"]),
            arg("thread", nargs="?", metavar="THREAD", help="delete: the thread to delete"),
            arg("--yes", action="store_true", help="delete: yes, remove its state and files for good"),
        ),
    ),
    Command(
        "skills",
        cmd_skills,
        "your skills (activate with /skill-name): list, turn on or off, install a .skill, delete",
        (
            arg("action", choices=["list", "enable", "disable", "install", "delete"]),
            arg("target", nargs="?", metavar="NAME|FILE", help="the skill's name; install: the .skill archive"),
            arg("--yes", action="store_true", help="delete: yes, remove the skill for good"),
        ),
    ),
    Command(
        "memory",
        cmd_memory,
        "your long-term memory: show, edit or delete a fact, clear, export, import",
        (
            arg("action", choices=["show", "edit", "delete", "clear", "export", "import"]),
            arg("target", nargs="?", metavar="FACT_ID|FILE", help="edit/delete: the fact; import: the file (-: stdin)"),
            arg("--content", help="edit: the fact's new text"),
            arg("--category", help="edit: the fact's new category"),
            arg("--confidence", type=float, help="edit: the fact's new confidence (0-1)"),
            arg("--output", metavar="FILE", help="export: write here instead of stdout"),
            arg("--yes", action="store_true", help="clear: yes, forget everything"),
        ),
    ),
    Command(
        "mcp",
        cmd_mcp,
        "your MCP servers: show them, set your own from a JSON file, enable or disable one",
        (
            arg("action", choices=["show", "set", "enable", "disable"]),
            arg("name", nargs="?", metavar="NAME|FILE", help="enable/disable: the server; set: the JSON file"),
        ),
    ),
    Command(
        "agents",
        cmd_agents,
        "your custom agents (DeerFlow's): list, show, create, delete",
        (
            arg("action", choices=["list", "show", "create", "delete"]),
            arg("name", nargs="?", metavar="NAME"),
            arg("--description", help="create: what the agent is for"),
            arg("--model", metavar="NAME", help="create: a model GET /api/models lists (default: the server's)"),
            arg("--soul-file", metavar="FILE", help="create: the agent's SOUL.md (personality and rules)"),
            arg("--skill", action="append", metavar="NAME", help="create: a skill it may use (repeatable)"),
            arg("--tool-group", action="append", metavar="NAME", help="create: a tool group (repeatable)"),
        ),
    ),
    Command(
        "schedule",
        cmd_schedule,
        "your schedules: runs that start themselves (create, list, pause, resume, trigger now, delete)",
        (
            arg("action", choices=["create", "list", "pause", "resume", "trigger", "delete"]),
            arg("target", nargs="?", metavar="MESSAGE|ID", help="create: the message each fire sends; else the id"),
            arg("--cron", metavar="EXPR", help="create: a cron expression, e.g. '0 9 * * 1-5'"),
            arg("--every", metavar="N{s,m,h,d}", help="create: an interval, e.g. 30s, 15m, 2h, 1d"),
            arg("--at", metavar="TIME", help="create: fire once at this ISO time"),
            arg("--tz", default="UTC", metavar="ZONE", help="create: the IANA time zone (default UTC)"),
            arg("--start", metavar="TIME", help="create: no fire before this ISO time"),
            arg("--end", metavar="TIME", help="create: no fire after this ISO time"),
            arg("--thread", metavar="ID", help="create: fire on this thread (default: a new thread each fire)"),
            arg("--model", metavar="NAME", help="create: a name from models (default: the configured one)"),
            arg("--plan-mode", action="store_true", help="create: enable plan mode (todo list)"),
            arg("--title", help="create: what the schedule is for"),
            arg("--overlap", choices=["skip", "allow"], default="skip", help="create: while the last run is open"),
            arg("--paused", action="store_true", help="create: paused (resume starts it)"),
        ),
    ),
    Command(
        "tools",
        cmd_tools,
        "the tools a run gets: built-in and MCP, deferred or not",
        (arg("action", choices=["list"]),),
    ),
)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="FILE", help="hartflow.yaml to use (default: ./hartflow.yaml)")
    common.add_argument("--json", action="store_true", help="machine-readable output")

    parser = argparse.ArgumentParser(
        prog="hartflow", description="DeerFlow's agent middleware pipeline as durable Temporal workflows."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        subparser = sub.add_parser(command.name, parents=[common], help=command.help)
        for argument in command.args:
            subparser.add_argument(*argument.flags, **argument.options)
        subparser.set_defaults(handler=command.handler)
    return parser
