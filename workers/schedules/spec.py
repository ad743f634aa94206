"""When a schedule fires, checked before anything is written, and the Temporal Schedule it becomes.

A schedule fires on a cron expression (five fields, or ``@hourly``/``@daily``/...), on an interval
(``@every 90s``, ``@every 15m``, ``@every 2h``, ``@every 1d``) or once (``run_at``), in an IANA time zone
(``UTC`` unless named), optionally only between ``start_at`` and ``end_at``.

The overlap policy says what a fire does while the schedule's previous run is still open, running or paused on
a question for days:

* ``skip`` (the default): nothing starts, and the fire is listed as skipped, naming the open run's thread. A
  schedule says "do this every morning": a run waiting for an answer has not done it yet, and the user expects
  that run to finish, not a pile of copies of the same request behind it (on a thread of its own a run could
  not start anyway: one run per thread). The next fire after the answer runs as usual.
* ``allow``: on a fresh thread each fire, every fire starts its run, whatever earlier ones wait for. A schedule
  on one thread cannot allow overlap (its thread takes one run at a time): refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleCalendarSpec,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleRange,
    ScheduleSpec,
    ScheduleState,
)

from vocabulary.contracts import ScheduleFireInput
from workflows.schedule_fire import ScheduleFireWorkflow

OVERLAPS = ("skip", "allow")
MIN_INTERVAL = timedelta(seconds=1)
_EVERY = re.compile(r"@every\s+(\d+)\s*(s|m|h|d)")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
CATCHUP_WINDOW = timedelta(hours=1)
"""A fire missed while Temporal itself was down happens late if Temporal is back within this window."""


class ScheduleProblem(ValueError):
    """The schedule as requested cannot be kept (a 422 for the API, exit status 2 for the CLI)."""


@dataclass
class When:
    """When a schedule fires: ``schedule`` (cron or ``@every``) or ``run_at`` (once), in ``timezone``."""

    schedule: str | None = None
    run_at: datetime | None = None
    timezone: str = "UTC"
    start_at: datetime | None = None
    end_at: datetime | None = None

    def about(self) -> dict[str, Any]:
        """How the schedule's views show it (kept with the schedule's action)."""
        return {
            "schedule": self.schedule,
            "run_at": _iso(self.run_at),
            "timezone": self.timezone,
            "start_at": _iso(self.start_at),
            "end_at": _iso(self.end_at),
        }


def when_from_about(about: dict[str, Any]) -> When:
    return When(
        schedule=about.get("schedule"),
        run_at=_parse(about.get("run_at")),
        timezone=about.get("timezone") or "UTC",
        start_at=_parse(about.get("start_at")),
        end_at=_parse(about.get("end_at")),
    )


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleProblem(f"timezone: {name[:80]!r} is not an IANA time zone") from None


def interval(text: str) -> timedelta | None:
    """The interval of ``@every N{s,m,h,d}``; ``None`` for any other text."""
    match = _EVERY.fullmatch(text.strip())
    if match is None:
        return None
    every = timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    if every < MIN_INTERVAL:
        raise ScheduleProblem(f"schedule: {text!r} is shorter than {MIN_INTERVAL.total_seconds():g}s")
    return every


def check(when: When, now: datetime | None = None) -> When:
    """``when`` with its times made aware (a naive time is in the schedule's zone), or :class:`ScheduleProblem`."""
    tz = zone(when.timezone)
    aware = When(
        schedule=when.schedule.strip() if when.schedule else None,
        run_at=_aware(when.run_at, tz),
        timezone=when.timezone,
        start_at=_aware(when.start_at, tz),
        end_at=_aware(when.end_at, tz),
    )
    if (aware.schedule is None) == (aware.run_at is None):
        raise ScheduleProblem("schedule: give a cron expression or '@every N{s,m,h,d}', or a run_at time (once)")
    if aware.schedule is not None and interval(aware.schedule) is None and not croniter.is_valid(aware.schedule):
        raise ScheduleProblem(f"schedule: {aware.schedule[:80]!r} is not a cron expression nor '@every N{{s,m,h,d}}'")
    if aware.schedule is not None and len(aware.schedule.split()) > 5:
        raise ScheduleProblem("schedule: a cron expression has five fields (minute hour day month weekday)")
    current = now or datetime.now(UTC)
    if aware.run_at is not None and aware.run_at <= current:
        raise ScheduleProblem("run_at: a one-time schedule must be in the future")
    if aware.start_at and aware.end_at and aware.end_at <= aware.start_at:
        raise ScheduleProblem("end_at: must be after start_at")
    if aware.end_at is not None and aware.end_at <= current:
        raise ScheduleProblem("end_at: must be in the future")
    return aware


def temporal_schedule(fire: ScheduleFireInput, when: When, task_queue: str, *, paused: bool, note: str) -> Schedule:
    """The Temporal Schedule that starts ``fire`` (``check`` ``when`` first)."""
    spec = ScheduleSpec(time_zone_name=when.timezone, start_at=when.start_at, end_at=when.end_at)
    state = ScheduleState(paused=paused, note=note)
    if when.run_at is not None:
        at = when.run_at.astimezone(zone(when.timezone))
        spec.calendars = [
            ScheduleCalendarSpec(
                second=[ScheduleRange(at.second)],
                minute=[ScheduleRange(at.minute)],
                hour=[ScheduleRange(at.hour)],
                day_of_month=[ScheduleRange(at.day)],
                month=[ScheduleRange(at.month)],
                year=[ScheduleRange(at.year)],
                day_of_week=[ScheduleRange(0, 6)],
            )
        ]
        state.limited_actions, state.remaining_actions = True, 1
    elif (every := interval(when.schedule or "")) is not None:
        spec.intervals = [ScheduleIntervalSpec(every=every)]
    else:
        spec.cron_expressions = [when.schedule or ""]
    return Schedule(
        action=ScheduleActionStartWorkflow(
            ScheduleFireWorkflow.run,
            fire,
            id=fire.schedule_id,
            task_queue=task_queue,
            static_summary=f"schedule {fire.about.get('title') or fire.schedule_id}",
        ),
        spec=spec,
        # Fires are short (they start a run and end): Temporal's overlap only meets a fire that cannot start
        # (no worker); what a fire does while the previous *run* is open is the schedule's own overlap (fire.py).
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP, catchup_window=CATCHUP_WINDOW),
        state=state,
    )


def _aware(value: datetime | None, tz: ZoneInfo) -> datetime | None:
    if value is None:
        return None
    return (value if value.tzinfo else value.replace(tzinfo=tz)).astimezone(UTC)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _parse(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None
