"""A closed run's archive: its final view and whole workflow stream (``activities/run_archive.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio.contrib.workflow_streams import WorkflowStreamState

from vocabulary.activity_ref import ActivityRef
from vocabulary.contracts.thread import ThreadRef


@dataclass
class HeldItem:
    """A stream item the run has not published yet: it goes out once the archive holding it is stored."""

    topic: str
    data: dict[str, Any]
    """The JSON value the run will publish on ``topic``."""


@dataclass
class RunArchiveInput:
    """A run that has ended, as its last activity stores it: ``view`` is its final ``RunView`` as a dict,
    ``stream`` its whole workflow stream (every topic, offsets from ``stream.base_offset``), ``version`` the
    thread version its final commit stored (0 for a run that commits nothing, a subagent)."""

    thread: ThreadRef
    run_id: str
    workflow_id: str
    view: dict[str, Any]
    stream: WorkflowStreamState
    version: int
    part: int = 0
    parts: int = 1
    """A stream too large for one activity input goes in ``parts`` calls: parts ``0 .. parts-2`` carry a slice
    of the stream only (``view`` empty), the last one the rest and the view (``activities/run_archive.py``)."""
    held: HeldItem | None = None
    """The run's ``run_finished`` event when the run holds it back until this archive and its final commit are
    stored (``workflows/run/finish.py``): archived after ``stream``'s items, at the offset it is then published at."""


RUN_ARCHIVE = ActivityRef("run.archive", RunArchiveInput, type(None))
"""Stores a closed run's final view and whole workflow stream (``activities/run_archive.py``)."""
