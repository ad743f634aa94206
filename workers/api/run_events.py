"""``GET /threads/{id}/runs/{run_id}/events``: a run's progress events after the fact, as DeerFlow's run events.

DeerFlow's subtask card backfills a subagent's steps on expand (after a reload the live ``task_running`` events
are gone) with ``GET …/runs/{run}/events?event_types=subagent.step&task_id=…&limit=…&after_seq=…`` and reads a
JSON list of ``{thread_id, run_id, seq, event_type, category, content, metadata, created_at}``
(``bytedance/deer-flow: frontend/src/core/tasks/api.ts``, ``steps.ts`` ``eventsToSteps``; the handler is
``backend/app/gateway/routers/thread_runs.py`` ``list_run_events``). The events are the run's own progress events
(``middlewares/_run_events.py`` ``RunEvent``), from its archive once its workflow chain closed
(``activities/run_archive.py``), from the open run's ``events`` query before (the events since its last
continue-as-new). A run is one segment of its chain: the events from its start offset to the pause or end that
closed it. Each is named as DeerFlow names it:

* ``task_running`` (a subagent's step, ``workflows/run/step_reports.py``) → ``subagent.step``, content
  ``{task_id, message_index, kind: ai|tool, text, truncated, tool_calls | tool_name}``;
* ``task_started`` → ``subagent.start``; ``task_completed`` / ``task_failed`` / ... → ``subagent.end``;
* ``run_finished`` → ``run.end``; any other event keeps its ``type``, category ``trace``, its fields as content.

``event_types`` (comma-separated), ``task_id``, ``after_seq`` (``seq`` is the event's stream offset) filter,
``limit`` (1–2000, default 500) pages.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from temporalio.client import WorkflowQueryRejectedError
from temporalio.common import QueryRejectCondition

from activities.run_archive import load_run_archive
from vocabulary.contracts import ThreadRef
from workers.api.deps import ApiContext, Context, Thread
from workers.api.records import RunRecord
from workflows.run import PROGRESS_TOPIC

router = APIRouter()

_SEGMENT_ENDS = frozenset({"awaiting_input", "run_finished"})
_SUBAGENT_ENDS = frozenset({"task_completed", "task_failed", "task_cancelled", "task_timed_out"})
_WIRE_FIELDS = frozenset({"seq", "kind", "type", "at"})


@router.get("/threads/{thread_id}/runs/{run_id}/events")
async def list_run_events(
    run_id: str,
    thread: Thread,
    context: Context,
    event_types: Annotated[str | None, Query(max_length=2000)] = None,
    task_id: Annotated[str | None, Query(max_length=256)] = None,
    limit: Annotated[int, Query(ge=1, le=2000)] = 500,
    after_seq: Annotated[int | None, Query(ge=0)] = None,
) -> list[dict[str, Any]]:
    record = await context.ledger.run(thread, run_id)
    wanted = {name.strip() for name in event_types.split(",") if name.strip()} if event_types else None
    found = []
    for event in await segment_events(context, thread, record):
        shaped = deerflow_event(record, event)
        if wanted is not None and shaped["event_type"] not in wanted:
            continue
        if task_id is not None and shaped["metadata"].get("task_id") != task_id:
            continue
        if after_seq is not None and shaped["seq"] <= after_seq:
            continue
        found.append(shaped)
        if len(found) == limit:
            break
    return found


async def segment_events(context: ApiContext, thread: ThreadRef, record: RunRecord) -> list[dict[str, Any]]:
    """The run's progress events, in order: from its start offset to the pause or end of its segment."""
    current = await context.ledger.chain(thread)
    events: list[dict[str, Any]] | None = None
    if current.first_run_id == record.workflow_run_id and current.active:
        handle = context.client.get_workflow_handle(record.workflow_id)
        try:
            events = await handle.query(
                "events", record.start_offset, result_type=list, reject_condition=QueryRejectCondition.NOT_OPEN
            )
        except WorkflowQueryRejectedError:
            events = None  # closed since: its archive has them
    if events is None:
        archive = await load_run_archive(context.objects, thread.user_id, thread.thread_id, record.workflow_run_id)
        topic = archive.topic(PROGRESS_TOPIC, from_offset=record.start_offset) if archive is not None else []
        events = [event.data for event in topic]
    segment = []
    for event in events:
        if not isinstance(event, dict) or int(event.get("seq", -1)) < record.start_offset:
            continue
        segment.append(event)
        if event.get("kind") in _SEGMENT_ENDS:
            break
    return segment


def deerflow_event(record: RunRecord, event: dict[str, Any]) -> dict[str, Any]:
    """One progress event as a DeerFlow run event."""
    name = str(event.get("type") or event.get("kind"))
    fields = {key: value for key, value in event.items() if key not in _WIRE_FIELDS}
    task_id = event.get("task_id") or event.get("call_id")
    metadata: dict[str, Any] = {"task_id": task_id} if task_id else {}
    if name == "task_running":
        event_type, category, content = "subagent.step", "subagent", step_content(event)
        metadata["message_index"] = content["message_index"]
    elif name == "task_started":
        event_type, category = "subagent.start", "subagent"
        content = {"task_id": task_id, "description": event.get("description")}
    elif name in _SUBAGENT_ENDS:
        event_type, category = "subagent.end", "subagent"
        content = {"task_id": task_id, "status": name.removeprefix("task_")}
        content |= {key: event[key] for key in ("model_name", "usage", "result", "error") if event.get(key)}
    elif name == "run_finished":
        event_type, category, content = "run.end", "outputs", fields
    else:
        event_type, category, content = name, "trace", fields
    return {
        "thread_id": record.thread_id,
        "run_id": record.run_id,
        "seq": int(event.get("seq", 0)),
        "event_type": event_type,
        "category": category,
        "content": content,
        "metadata": metadata,
        "created_at": event.get("at"),
    }


def step_content(event: dict[str, Any]) -> dict[str, Any]:
    """A ``task_running`` event as DeerFlow persists a subagent step (its ``build_subagent_step``)."""
    message = event.get("message")
    message = message if isinstance(message, dict) else {}
    kind = "tool" if message.get("type") == "tool" else "ai"
    text = message.get("content")
    content: dict[str, Any] = {
        "task_id": event.get("task_id"),
        "message_index": event.get("message_index"),
        "kind": kind,
        "text": text if isinstance(text, str) else "",  # a step carries its text (workflows/run/step_reports.py)
        "truncated": bool(event.get("truncated")),
    }
    if kind == "tool":
        content["tool_name"] = message.get("name")
    else:
        calls = message.get("tool_calls")
        content["tool_calls"] = [
            {key: call[key] for key in ("name", "args", "args_truncated") if key in call}
            for call in (calls if isinstance(calls, list) else [])
            if isinstance(call, dict)
        ]
    return content
