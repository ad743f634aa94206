"""``hartflow schedule create|list|pause|resume|trigger|delete``: the config user's schedules, the same ones (and
the same checks) as the Agent Server's cron routes (``workers/api/crons.py``, ``workers/schedules/book.py``).

``create MESSAGE`` with ``--cron EXPR``, ``--every 30s|15m|2h|1d`` or ``--at TIME`` (once), ``--tz``,
``--start``/``--end``, ``--thread ID`` (default: a fresh thread each fire), ``--model`` (a name from ``models``),
``--plan-mode``, ``--title``, ``--overlap skip|allow``, ``--paused``; the others take the schedule's id. Refusals
exit 2 and write nothing.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import Any

from fastapi import HTTPException

from workers.api.crons import cron_view
from workers.api.deps import ApiContext
from workers.api.schedule_common import checked_payload, schedule_call
from workers.cli._common import EXIT_OK, BadInput, config_of, emit, thread_of
from workers.config import HartflowConfig
from workers.schedules.book import Book
from workers.schedules.spec import When
from workers.stack import Stack


async def cmd_schedule(args: argparse.Namespace) -> int:
    config = config_of(args)
    if args.action != "list" and not args.target:
        raise BadInput(f"schedule {args.action} needs {'MESSAGE' if args.action == 'create' else 'ID'}")
    # The fires run on the deployment's workers: this command needs none of its own.
    async with Stack(config, need_worker=False, ui=False, quiet=args.json) as stack:
        schedules, user = Book(stack.client, config.temporal.task_queue), config.user_id
        try:
            if args.action == "create":
                shown: Any = await _create(config, ApiContext(config, stack.client), schedules, args)
            elif args.action == "list":
                shown = [cron_view(view) for view in await schedules.of_user(user)]
            elif args.action in ("pause", "resume"):
                shown = cron_view(await schedule_call(schedules.pause(user, args.target, args.action == "pause")))
            elif args.action == "trigger":
                await schedule_call(schedules.trigger(user, args.target))
                shown = {"cron_id": args.target, "triggered": True}
            else:
                await schedule_call(schedules.delete(user, args.target))
                shown = {"cron_id": args.target, "deleted": True}
        except HTTPException as exc:
            raise BadInput(str(exc.detail)) from None
        if args.action == "list":
            emit(args, {"schedules": shown}, lambda: _print_list(shown))
        else:
            emit(args, shown, lambda: print(_line(shown) if "schedule" in shown else f"{args.action}: {args.target}"))
    return EXIT_OK


async def _create(config: HartflowConfig, context: ApiContext, schedules: Book, args: argparse.Namespace) -> Any:
    chosen = [flag for flag in (args.cron, args.every, args.at) if flag]
    if len(chosen) != 1:
        raise BadInput("schedule create needs one of --cron EXPR, --every 30s|15m|2h|1d, --at TIME")
    options: dict[str, Any] = {}
    if args.model:
        options["model_name"] = args.model
    if args.plan_mode:
        options["is_plan_mode"] = True
    payload: dict[str, Any] = {
        "assistant_id": "lead_agent",
        "input": {"messages": [{"role": "user", "content": args.target}]},
    }
    if options:
        payload["context"] = options
    payload = await checked_payload(context, config.user_id, payload)
    thread = thread_of(config, args.thread).thread_id if args.thread else None
    when = When(
        schedule=args.cron or (f"@every {args.every}" if args.every else None),
        run_at=_time(args.at, "--at"),
        timezone=args.tz,
        start_at=_time(args.start, "--start"),
        end_at=_time(args.end, "--end"),
    )
    view = await schedule_call(
        schedules.create(
            config.user_id, thread, payload, when, overlap=args.overlap, title=args.title, paused=args.paused
        )
    )
    return cron_view(view)


def _time(value: str | None, flag: str) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise BadInput(f"{flag}: {value[:60]!r} is not an ISO date and time") from None


def _line(shown: dict[str, Any]) -> str:
    state = "on " if shown["enabled"] else "off"
    where = shown["thread_id"] or "(new thread each fire)"
    when = f"{shown['schedule']:<16} {shown['timezone']:<14} next {shown['next_run_date']}"
    return f"{shown['cron_id']}  {state}  {when}  {where}"


def _print_list(shown: list[dict[str, Any]]) -> None:
    if not shown:
        print("no schedules", file=sys.stderr)
    for schedule in shown:
        print(_line(schedule))
