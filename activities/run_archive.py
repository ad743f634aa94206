"""The run archive: what a closed run leaves behind so clients answer for it without replaying its history.

A run's last activity (``run.archive``, after its final commit) stores one JSON object per run, create-only,
at ``users/{user}/threads/{thread}/runs/{run_id}.json`` on the configured backend (the hartflow home or
``s3://bucket/prefix``), beside the thread's state versions, so deleting the thread deletes its archives too::

    {
      "format": 1,
      "user_id": "...", "thread_id": "...", "workflow_id": "hartflow-...",
      "run_id": "...",          # the run's first execution run id (RunView.run_id), stable across continue-as-new
      "version": 7,             # the thread version the run's final commit stored (0: it commits nothing)
      "view": {...},            # the final RunView as a dict: status, stop_reason, final_message, chain, ...
      "events": [               # the run's whole workflow stream: every topic, in offset order
        {"offset": 0, "topic": "progress", "data": {"kind": "model_call", ...}},
        ...
      ]
    }

A run that closes with ``run.close`` (``activities/run_close.py``) holds its ``run_finished`` event back until
the archive and its final commit are stored, so the archive's input carries it apart (``RunArchiveInput.held``):
it is stored as the last event, at the offset the run then publishes it at.

A stream too large for one activity input arrives in parts (``workflows/run/archive.py``): every part but the
last is stored first, create-only, at ``runs/{run_id}.part-{k}.json`` (``{"format", "run_id", "part",
"events"}``); the last one is the record above, with ``"parts": n`` and the events of its own slice, so a reader
that finds the record finds every part.

``offset`` is the stream's own global offset (what ``WorkflowStreamClient.subscribe`` reports, and a progress
event's ``seq``), ``data`` the JSON value the run published on ``topic``. Readers need no Temporal worker: the
CLI and the API server call :func:`load_run_archive`. A run that closed before archives existed has none
(``None``), and so has a run that is still open.

The write is create-only: a retried activity stores identical bytes and succeeds; different content for the
same run is a ``RunArchiveConflict`` (a bug to see, never overwritten).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from dataclasses import dataclass
from typing import Any

from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.contrib.workflow_streams import WorkflowStreamState
from temporalio.converter import PayloadConverter
from temporalio.exceptions import ApplicationError

from activities.contract import implements
from activities.storage import ObjectExistsError, ObjectStore, activity_errors
from vocabulary.contracts import RUN_ARCHIVE, RunArchiveInput
from vocabulary.paths import thread_dir

ARCHIVE_FORMAT = 1
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass
class ArchivedEvent:
    offset: int
    topic: str
    data: Any
    """The JSON value the run published on ``topic``."""


@dataclass
class RunArchive:
    thread_id: str
    run_id: str
    workflow_id: str
    view: dict[str, Any]
    """The run's final ``RunView`` as a dict (``status``, ``chain``, ``final_message``, ...)."""
    events: list[ArchivedEvent]
    """Every item of the run's workflow stream, in offset order."""
    version: int = 0
    """The thread version the run's final commit stored (0 when it commits nothing)."""

    def topic(self, name: str, *, from_offset: int = 0) -> list[ArchivedEvent]:
        """The events of one topic from ``from_offset`` on."""
        return [event for event in self.events if event.topic == name and event.offset >= from_offset]


def run_archive_key(user_id: str, thread_id: str, run_id: str) -> str:
    """Where the run's archive lives; every id is validated, so none can leave the thread's folder."""
    if not _RUN_ID.fullmatch(run_id):
        raise ValueError(f"invalid run id {run_id!r}")
    return f"{thread_dir(user_id, thread_id)}/runs/{run_id}.json"


def read_run_archive(objects: ObjectStore, user_id: str, thread_id: str, run_id: str) -> RunArchive | None:
    """The run's archive, or ``None`` when it has none (still open, or closed before archives existed)."""
    data = objects.get(run_archive_key(user_id, thread_id, run_id))
    if data is None:
        return None
    record: dict[str, Any] = json.loads(data)
    events = [
        event
        for part in range(int(record.get("parts", 1)) - 1)
        for event in _stored_part(objects, user_id, thread_id, run_id, part)
    ]
    events += record["events"]
    return RunArchive(
        thread_id=record["thread_id"],
        run_id=record["run_id"],
        workflow_id=record["workflow_id"],
        view=record["view"],
        events=[ArchivedEvent(int(e["offset"]), e["topic"], e["data"]) for e in events],
        version=int(record.get("version", 0)),
    )


def _part_key(user_id: str, thread_id: str, run_id: str, part: int) -> str:
    return run_archive_key(user_id, thread_id, run_id).removesuffix(".json") + f".part-{part}.json"


def _stored_part(objects: ObjectStore, user_id: str, thread_id: str, run_id: str, part: int) -> list[dict[str, Any]]:
    data = objects.get(_part_key(user_id, thread_id, run_id, part))
    if data is None:
        raise ValueError(f"the archive of run {run_id} lacks its part {part}")
    events: list[dict[str, Any]] = json.loads(data)["events"]
    return events


async def load_run_archive(objects: ObjectStore, user_id: str, thread_id: str, run_id: str) -> RunArchive | None:
    """:func:`read_run_archive` off the event loop (the storage interface is blocking)."""
    return await asyncio.to_thread(read_run_archive, objects, user_id, thread_id, run_id)


def archive_record(input: RunArchiveInput, converter: PayloadConverter) -> dict[str, Any]:
    """The JSON object stored for ``input``: stream items decoded with the converter that encoded them."""
    if input.part < input.parts - 1:
        return {
            "format": ARCHIVE_FORMAT,
            "run_id": input.run_id,
            "part": input.part,
            "events": _events(input.stream, converter),
        }
    extra = {"parts": input.parts} if input.parts > 1 else {}
    return {
        **extra,
        "format": ARCHIVE_FORMAT,
        "user_id": input.thread.user_id,
        "thread_id": input.thread.thread_id,
        "workflow_id": input.workflow_id,
        "run_id": input.run_id,
        "version": input.version,
        "view": input.view,
        "events": _events(input.stream, converter) + _held(input),
    }


def _events(stream: WorkflowStreamState, converter: PayloadConverter) -> list[dict[str, Any]]:
    events = []
    for index, item in enumerate(stream.log):
        payload = Payload()
        # The stream's wire form of an item: base64 of the serialized Payload (temporalio.contrib.workflow_streams).
        payload.ParseFromString(base64.b64decode(item.data))
        events.append(
            {"offset": stream.base_offset + index, "topic": item.topic, "data": converter.from_payload(payload)}
        )
    return events


def _held(input: RunArchiveInput) -> list[dict[str, Any]]:
    """The item the run publishes once this archive is stored, at the offset after the stream's last item."""
    if input.held is None:
        return []
    offset = input.stream.base_offset + len(input.stream.log)
    return [{"offset": offset, "topic": input.held.topic, "data": input.held.data}]


def store_run_archive(objects: ObjectStore, input: RunArchiveInput, converter: PayloadConverter) -> str:
    """Store the archive create-only; returns its key. Identical bytes already there are a retry's success."""
    key = run_archive_key(input.thread.user_id, input.thread.thread_id, input.run_id)
    if input.part < input.parts - 1:
        key = _part_key(input.thread.user_id, input.thread.thread_id, input.run_id, input.part)
    data = json.dumps(archive_record(input, converter), ensure_ascii=False, sort_keys=True, default=str).encode()
    try:
        objects.put(key, data, if_absent=True)
    except ObjectExistsError:
        if objects.get(key) != data:
            raise ApplicationError(
                f"run {input.run_id} already has a different archive at {key}",
                type="RunArchiveConflict",
                non_retryable=True,
            ) from None
    return key


class RunArchiveActivities:
    def __init__(self, objects: ObjectStore):
        self.objects = objects

    @implements(RUN_ARCHIVE)
    def archive(self, input: RunArchiveInput) -> None:
        with activity_errors():
            store_run_archive(self.objects, input, activity.payload_converter())
