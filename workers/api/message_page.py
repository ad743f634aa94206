"""``GET /threads/{id}/messages/page``: DeerFlow's paged thread history, from the thread's committed state.

DeerFlow's app loads a chat's history with it (``bytedance/deer-flow: frontend/src/core/threads/hooks.ts``,
``useThreadHistory``): newest page first, then older pages with ``before_seq``. The answer is DeerFlow's
``ThreadMessagesPageResponse`` (``backend/app/gateway/routers/thread_runs.py``): ``{data, has_more,
next_before_seq}``, ``data`` oldest first, each row ``{run_id, seq, content, metadata: {caller}, created_at}``
with the message as ``content``; ``next_before_seq`` is the page's oldest ``seq`` while older rows remain, else
``null``. ``limit`` is 1-200 (default 50), ``before_seq`` at least 1; ``after_seq`` is refused (422), as DeerFlow
refuses it on this backward-only route.

DeerFlow serves its run-event feed; hartflow serves what it has committed (``workers/api/ledger.py``), with the
feed's rules (DeerFlow's ``seed_thread_message_events`` in ``backend/packages/harness/deerflow/runtime/journal.py``
turns checkpoint messages into feed rows the same way):

* ``seq`` is the message's position (from 1) in the committed ``messages``, so it is the same on every page and
  in every later version while the thread only grows. A summarized thread (Summarization replaces the older
  messages with a summary, ``middlewares/summarization.py``) numbers what it keeps from 1 again: the rows it
  dropped are no longer committed anywhere, so they are not served.
* Human messages hidden from the UI (DynamicContext's reminders, ``hide_from_ui``) and summaries are not rows;
  the hidden answer to a clarification is (DeerFlow's ``ask_clarification`` exception), and a human message shows
  the user's own text (``original_user_content``, kept by the Uploads middleware). AI and tool messages are all
  rows (the app hides the hidden ones); subagents' and middlewares' messages never reach the thread's state.
* ``run_id`` is the API run of the turn: a turn opens at every such human message; the one the run's user message
  opens belongs to the API run that started that workflow (ThreadData stamps the message with its run id,
  ``middlewares/thread_data.py``), and each clarification answer opens the turn of the API run that resumed it.
  A turn with no API run (started by the CLI) is named after its workflow run.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request

from workers.api import records
from workers.api.deps import Context, Thread

router = APIRouter()
MAX_SEQ = 2**63 - 1
ORIGINAL_USER_CONTENT_KEY = "original_user_content"
_CLARIFICATION_SOURCE = "ask_clarification"


@router.get("/threads/{thread_id}/messages/page")
async def messages_page(
    request: Request,
    thread: Thread,
    context: Context,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    before_seq: Annotated[int | None, Query(ge=1, le=MAX_SEQ)] = None,
) -> dict[str, Any]:
    if "after_seq" in request.query_params:
        raise HTTPException(422, "after_seq is not supported by this backward-only endpoint")
    await context.ledger.require_thread(thread)
    values, _, committed_at = await context.ledger.committed(thread)
    runs = await context.ledger.runs(thread, await context.ledger.chain(thread))
    rows = feed_rows(values.get("messages") or [], runs, committed_at)
    older = [row for row in rows if before_seq is None or row["seq"] < before_seq]
    page = older[-limit:]
    has_more = len(older) > len(page)
    return {"data": page, "has_more": has_more, "next_before_seq": page[0]["seq"] if has_more else None}


def feed_rows(
    messages: list[dict[str, Any]], runs: list[records.RunRecord], committed_at: str | None
) -> list[dict[str, Any]]:
    """The committed ``messages`` as DeerFlow's feed rows, oldest first."""
    turns = _Turns(runs)
    rows = []
    for position, message in enumerate(messages, start=1):
        kind = message.get("type")
        kwargs = message.get("additional_kwargs") or {}
        if kind == "human":
            if not _persisted_human(message):
                continue
            turns.open(kwargs)
            message = _users_own_text(message)
        elif kind not in ("ai", "tool"):
            continue  # system and removal messages are no feed rows
        rows.append(
            {
                "run_id": turns.run_id,
                "seq": position,
                "content": message,
                "metadata": {} if kind == "tool" else {"caller": "lead_agent"},
                "created_at": turns.started_at or committed_at,
            }
        )
    return rows


def _persisted_human(message: dict[str, Any]) -> bool:
    """DeerFlow's ``_should_persist_human_input_message``: no summary, nothing hidden but a clarification answer."""
    if message.get("name") == "summary":
        return False
    kwargs = message.get("additional_kwargs") or {}
    if kwargs.get("hide_from_ui") is not True:
        return True
    response = kwargs.get("human_input_response")
    return isinstance(response, dict) and response.get("source") == _CLARIFICATION_SOURCE


def _users_own_text(message: dict[str, Any]) -> dict[str, Any]:
    """The message with the user's own text (DeerFlow's ``restore_original_human_message``)."""
    kwargs = dict(message.get("additional_kwargs") or {})
    original = kwargs.pop(ORIGINAL_USER_CONTENT_KEY, None)
    if not isinstance(original, str):
        return message
    return {**message, "content": original, "additional_kwargs": kwargs}


class _Turns:
    """Which API run each turn belongs to, from the thread's run records."""

    def __init__(self, runs: list[records.RunRecord]) -> None:
        self._segments: dict[str, list[str]] = {}
        for record in sorted(runs, key=lambda r: (r.workflow_run_id, r.start_offset)):
            self._segments.setdefault(record.workflow_run_id, []).append(record.run_id)
        self._count = 0
        self._workflow_run: str | None = None
        self._resumes = 0
        self.run_id = "turn-0"
        self.started_at: str | None = None

    def open(self, kwargs: dict[str, Any]) -> None:
        self._count += 1
        stamped = kwargs.get("run_id")
        if isinstance(kwargs.get("human_input_response"), dict) and self._workflow_run is not None:
            self._resumes += 1  # the answer to a pause of the same workflow run: its next API run
            segments = self._segments.get(self._workflow_run, [])
            self.run_id = (
                segments[self._resumes] if self._resumes < len(segments) else f"{self._workflow_run}-{self._resumes}"
            )
            return
        if isinstance(stamped, str) and stamped:
            self._workflow_run, self._resumes = stamped, 0
            self.run_id = next(iter(self._segments.get(stamped, [])), stamped)
        else:
            self._workflow_run, self.run_id = None, f"turn-{self._count}"
        timestamp = kwargs.get("timestamp")
        self.started_at = timestamp if isinstance(timestamp, str) else None
