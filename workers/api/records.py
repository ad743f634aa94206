"""What the API keeps beside a thread's state in storage: the thread's record and one record per API run.

    users/{u}/threads/{t}/api/thread.json          {thread_id, created_at, updated_at, metadata}
    users/{u}/threads/{t}/api/runs/{run_id}.json   RunRecord

Both live under the thread's prefix, so deleting the thread deletes them, and no other user's key can reach
them. A run record says which segment of the thread's workflow the run is: the workflow chain
(``workflow_run_id``, its first execution) and the stream offset the segment starts at. Its status is not
stored while the chain is current; it is read from Temporal (``workers/api/status.py``).

A run that starts a workflow is written down twice: in the workflow's memo (:data:`RUN_MEMO`, part of the start
itself) and then in storage. The start and the storage write cannot be one transaction, so when the write fails
(storage down, the server killed between the two) the memo still has the run, and :func:`recovered` writes its
record from it on the next read: a client that retries after a failed create sees the run it made and joins it,
instead of starting it a second time (found by ``bench.soak``: a whole run twice, or the prompt taken as the
answer to the clarification the first run asked).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from activities.storage import ObjectStore
from activities.thread_store import ObjectThreadStore
from vocabulary.contracts import ThreadRef

RUN_ID_PATTERN = re.compile(r"[0-9a-f-]{36}")
RUN_MEMO = "hartflow_api_run"
"""The workflow memo key holding the API run that started the workflow (:func:`memo_of` / :func:`from_memo`)."""


def now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class RunRecord:
    run_id: str
    thread_id: str
    assistant_id: str
    workflow_id: str
    workflow_run_id: str
    start_offset: int
    created_at: str
    metadata: dict[str, Any] = field(default_factory=dict)
    kwargs: dict[str, Any] = field(default_factory=dict)
    multitask_strategy: str = "reject"
    final_status: str | None = None
    """Written once the run's workflow chain was superseded by a newer one (``status.py`` then reads it);
    :data:`ROLLED_BACK`: the run is gone for clients (a tombstone, so its workflow's memo does not bring it back)."""


ROLLED_BACK = "rolled_back"


def _api_prefix(thread: ThreadRef) -> str:
    return f"{ObjectThreadStore.thread_prefix(thread)}api/"


def _read(objects: ObjectStore, key: str) -> dict[str, Any] | None:
    data = objects.get(key)
    return None if data is None else dict(json.loads(data))


def _write(objects: ObjectStore, key: str, value: dict[str, Any]) -> None:
    objects.put(key, json.dumps(value, ensure_ascii=False).encode("utf-8"))


def thread_record(objects: ObjectStore, thread: ThreadRef) -> dict[str, Any] | None:
    return _read(objects, f"{_api_prefix(thread)}thread.json")


def save_thread_record(objects: ObjectStore, thread: ThreadRef, record: dict[str, Any]) -> None:
    _write(objects, f"{_api_prefix(thread)}thread.json", record)


def new_thread_record(thread: ThreadRef, metadata: dict[str, Any]) -> dict[str, Any]:
    stamp = now()
    return {"thread_id": thread.thread_id, "created_at": stamp, "updated_at": stamp, "metadata": metadata}


def run_record(objects: ObjectStore, thread: ThreadRef, run_id: str) -> RunRecord | None:
    if not RUN_ID_PATTERN.fullmatch(run_id):
        return None
    data = _read(objects, f"{_api_prefix(thread)}runs/{run_id}.json")
    return None if data is None else RunRecord(**data)


def save_run_record(objects: ObjectStore, thread: ThreadRef, record: RunRecord) -> None:
    _write(objects, f"{_api_prefix(thread)}runs/{record.run_id}.json", asdict(record))


def memo_of(record: RunRecord) -> dict[str, Any]:
    """What the workflow's memo keeps of the run that starts it: the record but its execution (the memo is the
    execution's own) and the prompt (in the workflow's input already)."""
    kept = asdict(record)
    del kept["workflow_run_id"]
    kept["kwargs"] = {k: v for k, v in record.kwargs.items() if k != "input"}
    return kept


def from_memo(memo: dict[str, Any], workflow_run_id: str) -> RunRecord | None:
    """The run recorded in a workflow's memo (``None`` for a workflow no API run started)."""
    kept = memo.get(RUN_MEMO)
    if not isinstance(kept, dict):
        return None
    return RunRecord(**{**kept, "workflow_run_id": workflow_run_id})


def unrecorded(found: list[RunRecord], started_by: RunRecord | None) -> RunRecord | None:
    """The run that started a chain (from its memo) when ``found`` lacks it: its record never reached storage."""
    if started_by is None or any(record.run_id == started_by.run_id for record in found):
        return None
    return started_by


def run_records(objects: ObjectStore, thread: ThreadRef) -> list[RunRecord]:
    """The thread's runs, newest first."""
    records = []
    prefix = f"{_api_prefix(thread)}runs/"
    for info in objects.list(prefix):
        data = _read(objects, info.key)
        if data is not None:
            records.append(RunRecord(**data))
    return newest_first(records)


def newest_first(records: list[RunRecord]) -> list[RunRecord]:
    return sorted(records, key=lambda record: (record.created_at, record.start_offset), reverse=True)
