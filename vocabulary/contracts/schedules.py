"""A schedule's fire: the activity that starts one scheduled run (``workers/schedules/fire.py``), called by the
small workflow a Temporal Schedule starts at each fire (``workflows/schedule_fire.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vocabulary.activity_ref import ActivityRef


@dataclass
class ScheduleFireInput:
    """A schedule's action: whose it is, where its runs go, and the run request each fire sends."""

    schedule_id: str
    """The Temporal Schedule (``vocabulary/workflow_ids.schedule_id``)."""
    user_id: str
    thread_id: str | None
    """The thread every fire runs on; ``None``: a fresh thread each fire."""
    payload: dict[str, Any]
    """The Agent Server run request each fire sends (``input``, ``config``, ``context``, ``metadata``, ...)."""
    overlap: str = "skip"
    """What a fire does while the schedule's previous run is still open (``workers/schedules/spec.py``)."""
    about: dict[str, Any] = field(default_factory=dict)
    """What clients show and edit (title, schedule text, time zone, created/updated times); the fire ignores it."""


@dataclass
class ScheduleFireResult:
    outcome: str
    """``started``, or ``skipped`` (the thread's or the previous fire's run is still open)."""
    thread_id: str
    """The thread of the started run, or the one whose open run made the fire skip."""
    run_id: str | None = None
    """The API run the fire started (``GET /threads/{thread_id}/runs/{run_id}``)."""
    reason: str = ""


SCHEDULE_FIRE = ActivityRef("schedule.fire", ScheduleFireInput, ScheduleFireResult)
"""Starts the schedule's run as the Agent Server starts every run, or says why it skipped."""
