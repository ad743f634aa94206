"""Thread runs: create, stream, wait, list, get, join (JSON), join the stream (``Last-Event-ID``), cancel (``action``
``interrupt``, or ``rollback``: ``workers/api/multitask.py``).

Every stream carries ``Location`` (where to rejoin it) and ``Content-Location`` (the run), so ``langgraph-sdk``
reconnects by itself after a dropped connection, with the last event id it saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, HTTPException, Query, Response
from sse_starlette.sse import EventSourceResponse
from starlette.responses import JSONResponse, StreamingResponse
from temporalio.client import WorkflowFailureError, WorkflowHandle

from vocabulary.contracts import ThreadRef
from workers.api import multitask, queued, records
from workers.api.deps import ApiContext, Context, Thread
from workers.api.ledger import run_status
from workers.api.outages import riding_out, storage_down, unreachable
from workers.api.run_request import RunCreate, stream_modes
from workers.api.starting import begin
from workers.api.stream import Frame, RunFrames, resume_point, run_frames
from workers.client.runs import Runs

router = APIRouter()
HEARTBEAT_SECONDS = 10
KEEPALIVE_SECONDS = 5
_background: set[asyncio.Task[Any]] = set()
_log = logging.getLogger("hartflow.api")


def _locations(record: records.RunRecord, tail: str) -> dict[str, str]:
    # Relative to the client's base URL: the SDK joins them onto it (``/api`` included when it has one).
    run = f"/threads/{record.thread_id}/runs/{record.run_id}"
    return {"Location": f"{run}/{tail}", "Content-Location": run}


async def _status_of(context: ApiContext, thread: ThreadRef, record: records.RunRecord) -> str:
    """The run's LangGraph status as the ledger pieces it together (the one seam a test stands in for, to read a
    status a moment old)."""
    return await context.ledger.status_of(thread, record)


def _run_view(record: records.RunRecord, langgraph_status: str) -> dict[str, Any]:
    return {
        "run_id": record.run_id,
        "thread_id": record.thread_id,
        "assistant_id": record.assistant_id,
        "status": langgraph_status,
        "created_at": record.created_at,
        "updated_at": record.created_at,
        "metadata": record.metadata,
        "multitask_strategy": record.multitask_strategy,
        "kwargs": record.kwargs,
    }


def _sse(frames: AsyncIterator[Frame], headers: dict[str, str]) -> EventSourceResponse:
    async def events() -> AsyncIterator[dict[str, Any]]:
        async for frame in frames:
            event = {"event": frame.event, "data": json.dumps(frame.data, ensure_ascii=False, separators=(",", ":"))}
            yield event if frame.id is None else {**event, "id": frame.id}

    return EventSourceResponse(
        events(), ping=HEARTBEAT_SECONDS, headers={**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


async def _framed(
    context: ApiContext,
    thread: ThreadRef,
    frames: RunFrames,
    after: tuple[int, ...] | None,
    *,
    cancel_on_disconnect: bool,
) -> AsyncIterator[Frame]:
    """metadata (unless resuming after an event), the run's frames, then ``end``; a consumer that goes away
    with ``cancel_on_disconnect`` cancels the run (its after_agent hooks still run: they are the compensation)."""
    live = True
    ended = False
    try:
        if after is None:
            yield frames.metadata()
        if not await queued.until_started(context, thread, frames.record):
            live = False
            ended = True
            yield Frame("end", None)
            return
        current = await riding_out(lambda: context.ledger.chain(thread), "opening a stream")
        live = current.first_run_id == frames.record.workflow_run_id and current.active
        async for frame in run_frames(context.client, context.objects, thread, frames, after, current):
            yield frame
        ended = True
        yield Frame("end", None)
    except Exception as exc:
        if not (unreachable(exc) or storage_down(exc)):
            raise
        # Away past the outage budget: the consumer hears why, and resumes from its last event id later.
        ended = True  # not a consumer going away: nothing to cancel
        service = "storage" if storage_down(exc) else "Temporal"
        _log.warning("stream of run %s ended, %s unavailable: %s", frames.record.run_id, service, exc)
        yield Frame("error", {"error": "ServiceUnavailable", "message": f"{service} unavailable: {exc}"})
    finally:
        if cancel_on_disconnect and not ended and live:
            task = asyncio.create_task(_cancel(context, frames.record))
            _background.add(task)
            task.add_done_callback(_background.discard)


def _run_handle(context: ApiContext, record: records.RunRecord) -> WorkflowHandle[Any, Any]:
    """The run's own workflow chain: the workflow id names the thread, and a newer run of the thread is a new
    chain under the same id, so a cancel (or a wait) aimed at the id alone could reach a run it was not meant
    for. ``first_execution_run_id`` pins the chain: Temporal refuses the call once that chain is closed."""
    return context.client.get_workflow_handle(record.workflow_id, first_execution_run_id=record.workflow_run_id or None)


async def _cancel(context: ApiContext, record: records.RunRecord) -> bool:
    """Ask the run's chain to cancel; ``False`` when it is gone (closed, or replaced by a newer run's chain)."""
    return await Runs(context.client).cancel(record.workflow_id, first_execution_run_id=record.workflow_run_id or None)


def _result_response(result: Coroutine[Any, Any, dict[str, Any]], headers: dict[str, str]) -> StreamingResponse:
    """The run's result as JSON once it settles; until then a newline every few seconds (JSON allows leading
    whitespace), so no proxy or client read timeout ends a long wait."""

    async def body() -> AsyncIterator[bytes]:
        task = asyncio.ensure_future(result)
        try:
            while not (await asyncio.wait({task}, timeout=KEEPALIVE_SECONDS))[0]:
                yield b"\n"
            yield json.dumps(task.result(), ensure_ascii=False).encode("utf-8")
        finally:
            task.cancel()  # the client went away: stop reading the run (the run itself goes on)

    return StreamingResponse(body(), media_type="application/json", headers=headers)


async def _settle(context: ApiContext, thread: ThreadRef, record: records.RunRecord) -> dict[str, Any]:
    frames = RunFrames(record, ["values"])
    if not await queued.until_started(context, thread, record):
        return frames.result()
    current = await context.ledger.chain(thread)
    async for _ in run_frames(context.client, context.objects, thread, frames, None, current):
        pass
    return frames.result()


@router.post("/threads/{thread_id}/runs")
async def create_run(body: RunCreate, thread: Thread, context: Context) -> JSONResponse:
    record = await begin(context, thread, body)
    # Started or resumed by this request: running as the answer leaves (GET reads it again); queued: pending.
    started = "running" if record.workflow_run_id else "pending"
    return JSONResponse(_run_view(record, started), headers=_locations(record, "stream"))


@router.post("/threads/{thread_id}/runs/stream")
async def stream_run(body: RunCreate, thread: Thread, context: Context) -> EventSourceResponse:
    record = await begin(context, thread, body)
    frames = RunFrames(record, body.modes())
    framed = _framed(context, thread, frames, None, cancel_on_disconnect=body.on_disconnect == "cancel")
    return _sse(framed, _locations(record, "stream"))


@router.post("/threads/{thread_id}/runs/wait")
async def wait_run(body: RunCreate, thread: Thread, context: Context) -> StreamingResponse:
    record = await begin(context, thread, body)
    return _result_response(_settle(context, thread, record), _locations(record, "join"))


@router.get("/threads/{thread_id}/runs")
async def list_runs(
    thread: Thread,
    context: Context,
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
    offset: Annotated[int, Query(ge=0)] = 0,
    status_filter: Annotated[str | None, Query(alias="status")] = None,
) -> list[dict[str, Any]]:
    await context.ledger.require_thread(thread)  # an unknown thread is 404, whoever else has one
    current = await context.ledger.chain(thread)
    found = await context.ledger.runs(thread, current)
    views = []
    for record in found:
        view = _run_view(record, run_status(record, current, found))
        if status_filter in (None, view["status"]):
            views.append(view)
    return views[offset : offset + limit]


@router.get("/threads/{thread_id}/runs/{run_id}")
async def get_run(run_id: str, thread: Thread, context: Context) -> dict[str, Any]:
    record = await context.ledger.run(thread, run_id)
    return _run_view(record, await _status_of(context, thread, record))


@router.get("/threads/{thread_id}/runs/{run_id}/join")
async def join_run(run_id: str, thread: Thread, context: Context) -> StreamingResponse:
    record = await context.ledger.run(thread, run_id)
    return _result_response(_settle(context, thread, record), _locations(record, "join"))


@router.get("/threads/{thread_id}/runs/{run_id}/stream")
async def join_stream(
    run_id: str,
    thread: Thread,
    context: Context,
    stream_mode: Annotated[list[str] | None, Query()] = None,
    cancel_on_disconnect: bool = False,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    record = await context.ledger.run(thread, run_id)
    after = resume_point(last_event_id)
    modes = stream_modes(stream_mode or record.kwargs.get("stream_mode") or ["values"])
    framed = _framed(context, thread, RunFrames(record, modes), after, cancel_on_disconnect=cancel_on_disconnect)
    return _sse(framed, _locations(record, "stream"))


@router.post("/threads/{thread_id}/runs/{run_id}/cancel")
async def cancel_run(
    run_id: str,
    thread: Thread,
    context: Context,
    wait: bool = False,
    action: Literal["interrupt", "rollback"] = "interrupt",
) -> Response:
    record = await context.ledger.run(thread, run_id)
    current_status = await _status_of(context, thread, record)
    if current_status not in ("pending", "running"):
        raise HTTPException(409, f"run {run_id} is {current_status}: only a running run can be cancelled")
    if not record.workflow_run_id and await queued.withdraw(context, thread, record):
        return Response(status_code=204 if wait else 202)  # taken out of the queue: it never ran
    if action == "rollback":
        # The thread goes back to the version the run started from, and the run is deleted (LangGraph's rollback):
        # that needs the run closed, so the answer comes once it has, with or without ``wait``.
        await multitask.roll_back(context, thread, record)
        return Response(status_code=204 if wait else 202)
    handle = _run_handle(context, record)
    if not await _cancel(context, record):
        raise HTTPException(409, f"run {run_id} is no longer running: only a running run can be cancelled")
    if not wait:
        return Response(status_code=202)
    with contextlib.suppress(WorkflowFailureError):  # cancelled: what we asked for
        await handle.result()
    return Response(status_code=204)
