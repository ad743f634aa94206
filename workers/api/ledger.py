"""The Agent Server's ledger of threads and API runs: every storage read and write of the thread and run routes,
and the one place an API run's LangGraph status is pieced together.

A run's status comes from three places: its record in storage (``records.py``: which segment of the thread's
workflow it is, and its final status once a newer chain replaced its own), the memo of the workflow it started
(a record that never reached storage is recovered from there, :meth:`Ledger.run` and :meth:`Ledger.runs`), and
Temporal's description of the thread's newest chain (:meth:`Ledger.chain`, ``status.py``). Routes ask the ledger
and never combine them themselves; a route that describes the thread's workflow passes that one
:class:`~workers.api.status.Chain` on instead of describing it again.

Storage is blocking (boto3, the filesystem): every call runs in a worker thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from fastapi import HTTPException
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.storage import ObjectStore, StorageError
from activities.thread_store import ObjectThreadStore
from vocabulary.contracts import CommitLineage, ThreadRef
from vocabulary.state import ThreadState
from workers.api import records, status
from workers.client.queue import ThreadQueue

Committed = tuple[dict[str, Any], int, str | None]
"""A thread's committed values, their version and when they were committed (``{"messages": []}, 0, None``: none)."""

_log = logging.getLogger("hartflow.api")


def existing_record(objects: ObjectStore, store: ObjectThreadStore, thread: ThreadRef) -> dict[str, Any] | None:
    """The thread's API record; a thread the CLI made (state, no record) gets one made up from its state."""
    record = records.thread_record(objects, thread)
    if record is not None:
        return record
    committed = store.record(thread)
    if committed is None:
        return None
    stamp = committed.get("committed_at") or records.now()
    return {"thread_id": thread.thread_id, "created_at": stamp, "updated_at": stamp, "metadata": {}}


class Ledger:
    """The threads and API runs of one deployment, as the routes read and write them."""

    def __init__(self, client: Client, objects: ObjectStore, store: ObjectThreadStore) -> None:
        self._client = client
        self._objects = objects
        self._store = store

    # Threads.

    async def thread(self, thread: ThreadRef) -> dict[str, Any] | None:
        """The thread's API record (made up from its state for a thread the CLI made), ``None`` when unknown."""
        return await asyncio.to_thread(existing_record, self._objects, self._store, thread)

    async def require_thread(self, thread: ThreadRef) -> dict[str, Any]:
        """The thread's API record; an unknown thread is 404, whoever else has one of that name."""
        record = await self.thread(thread)
        if record is None:
            raise HTTPException(404, f"thread {thread.thread_id} not found")
        return record

    async def thread_exists(self, thread: ThreadRef) -> bool:
        """The thread has an API record or committed state (cheaper than :meth:`thread`: nothing is read)."""

        def exists() -> bool:
            return records.thread_record(self._objects, thread) is not None or self._store.exists(thread)

        return await asyncio.to_thread(exists)

    async def save_thread(self, thread: ThreadRef, record: dict[str, Any]) -> None:
        await asyncio.to_thread(records.save_thread_record, self._objects, thread, record)

    async def stamp_thread(self, thread: ThreadRef, stamp: dict[str, Any]) -> None:
        """Merge ``stamp`` into the thread's metadata (no write when it says so already)."""
        record = await self.thread(thread)
        if record is None or all(record["metadata"].get(key) == value for key, value in stamp.items()):
            return
        metadata = {**record["metadata"], **stamp}
        await self.save_thread(thread, {**record, "metadata": metadata, "updated_at": records.now()})

    async def committed(self, thread: ThreadRef) -> Committed:
        """The thread's newest committed values, their version and when they were committed."""
        found = await asyncio.to_thread(self._store.record, thread)
        if found is None:
            return {"messages": []}, 0, None
        return dict(found["state"]), int(found["version"]), found.get("committed_at")

    async def versions(self, thread: ThreadRef) -> list[int]:
        """The retained versions of the thread's state."""
        return list(await asyncio.to_thread(self._store.versions, thread))

    async def version(self, thread: ThreadRef, version: int) -> dict[str, Any] | None:
        """One retained version of the thread's state (its record), ``None`` once pruned."""
        return await asyncio.to_thread(self._store.version_record, thread, version)

    async def commit(
        self, thread: ThreadRef, state: ThreadState, expected_version: int, writer: str, lineage: CommitLineage
    ) -> int:
        """Commit ``state`` on top of ``expected_version`` (a state update, a fork); ``ThreadConflictError`` when a
        run committed meanwhile."""
        return await asyncio.to_thread(
            self._store.commit, thread, state, expected_version=expected_version, run_id=writer, lineage=lineage
        )

    # The thread's workflow.

    async def chain(self, thread: ThreadRef) -> status.Chain:
        """The thread's newest workflow chain, described once (the route passes it on)."""
        return await status.chain(self._client, thread)

    async def pending_request(self, thread: ThreadRef, current: status.Chain) -> dict[str, Any] | None:
        """The question a paused chain asks, from the thread's committed state (no worker needed)."""
        if current.status != "awaiting_input":
            return None
        found = await asyncio.to_thread(self._store.record, thread)
        return status.pending_request((found or {}).get("state"))

    # API runs.

    async def run(self, thread: ThreadRef, run_id: str) -> records.RunRecord:
        """The run ``run_id`` of the thread (its record written from the memo when it never reached storage);
        an unknown one is 404."""
        record = await asyncio.to_thread(records.run_record, self._objects, thread, run_id)
        if record is not None and record.final_status != records.ROLLED_BACK:
            if not record.workflow_run_id:
                await self._resolve_queued(thread, [record], await self.chain(thread))
            return record
        current = await self.chain(thread)
        if record is None and current.started_by is not None and current.started_by.run_id == run_id:
            return await self._recover(thread, current.started_by)
        raise HTTPException(404, f"run {run_id} not found on thread {thread.thread_id}")

    async def runs(self, thread: ThreadRef, current: status.Chain) -> list[records.RunRecord]:
        """The thread's runs, newest first, with the one that started ``current`` when its record never reached
        storage."""
        found = await asyncio.to_thread(records.run_records, self._objects, thread)
        await self._resolve_queued(thread, found, current)
        await self._settle_replaced(thread, found, current)
        lost = records.unrecorded(found, current.started_by)
        shown = [record for record in found if record.final_status != records.ROLLED_BACK]
        if lost is None:
            return shown
        return records.newest_first([await self._recover(thread, lost), *shown])

    async def save_run(self, thread: ThreadRef, record: records.RunRecord) -> None:
        await asyncio.to_thread(records.save_run_record, self._objects, thread, record)

    async def status_of(self, thread: ThreadRef, record: records.RunRecord) -> str:
        """The run's LangGraph status: one describe of the thread's workflow, and its siblings' records."""
        current = await self.chain(thread)
        siblings = await asyncio.to_thread(records.run_records, self._objects, thread)
        await self._settle_replaced(thread, [record], current, siblings)
        return run_status(record, current, siblings)

    async def finalize_previous(self, thread: ThreadRef, previous: status.Chain) -> None:
        """The previous chain is closed and a new one started: its last run's status is now fixed, so write it
        down (Temporal answers for the newest chain only)."""
        if previous.first_run_id is None:
            return

        def finalize() -> None:
            stored = records.run_records(self._objects, thread)
            if (lost := records.unrecorded(stored, previous.started_by)) is not None:
                stored.append(lost)  # its record never reached storage (records.py): now or never
            for record in stored:
                if record.workflow_run_id == previous.first_run_id and record.final_status is None:
                    record.final_status = run_status(record, previous, [])
                    records.save_run_record(self._objects, thread, record)
                    return

        await asyncio.to_thread(finalize)

    async def _resolve_queued(self, thread: ThreadRef, found: list[records.RunRecord], current: status.Chain) -> None:
        """Name the chain of every queued run in ``found`` that its queue started (``workers/api/queued.py``), and
        write it down: the thread's newest chain says for its own run, the thread's queue for the others."""
        waiting = [record for record in found if not record.workflow_run_id and record.final_status is None]
        if not waiting:
            return
        started = {} if current.started_by is None else {current.started_by.run_id: current.first_run_id or ""}
        if any(record.run_id not in started for record in waiting):
            started = {**await ThreadQueue(self._client).started(thread), **started}
        for record in waiting:
            if started.get(record.run_id):
                record.workflow_run_id = started[record.run_id]
                await self.save_run(thread, record)

    async def _settle_replaced(
        self,
        thread: ThreadRef,
        found: list[records.RunRecord],
        current: status.Chain,
        siblings: list[records.RunRecord] | None = None,
    ) -> None:
        """Write down, once, how each run in ``found`` ended whose chain a newer one replaced without an API start
        to do it (``finalize_previous``): the thread's queue started the newer chain, or the CLI did. Only the
        last run of a chain needs it (a run that a later one of its chain followed ended at a pause)."""
        siblings = found if siblings is None else siblings
        for record in found:
            if (
                record.final_status is not None
                or not record.workflow_run_id
                or record.workflow_run_id == current.first_run_id
                or status.followed(record, siblings)
            ):
                continue
            try:
                ended = await status.replaced_chain_status(self._client, record.workflow_id, record.workflow_run_id)
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise
                continue  # past Temporal's retention: how it ended is no longer known
            if ended is not None:
                record.final_status = status.RUN_STATUS[ended]
                await self.save_run(thread, record)

    async def _recover(self, thread: ThreadRef, lost: records.RunRecord) -> records.RunRecord:
        """Write down a run whose record the start's memo kept (``records.py``); a failed write is tried again by
        the next read."""
        _log.warning(
            "run %s of thread %s had no record: written from its workflow's memo", lost.run_id, thread.thread_id
        )
        with contextlib.suppress(StorageError):
            await self.save_run(thread, lost)
        return lost


def run_status(record: records.RunRecord, current: status.Chain, siblings: list[records.RunRecord]) -> str:
    """The LangGraph status of the run ``record``, given the thread's newest chain and the thread's runs (a
    later run that resumed the same chain means this one ended at a pause)."""
    return status.run_status(record, current, status.followed(record, siblings))
