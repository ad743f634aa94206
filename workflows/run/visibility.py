"""What the Temporal Web UI shows of a run while it runs: its search attributes and its current details.

Both are functions of the run's fields (``workflows/run/fields.py``) and of the turn and stop reason on the
context: :class:`Visibility` reads them and writes nothing but visibility (search-attribute upserts, which are
commands, and the current details, which are not).

The turn count alone is upserted every :data:`TURNS_EVERY` turns (since the ``hartflow-turns-by-count`` patch):
each upsert is a history event and a visibility write on the server, which on every turn cost ~2 ms of the
server's CPU a turn (``python -m bench.breakdown``). Any other change (the status, the stop reason) upserts the
current count with it, so a paused or ended run always shows its turns; the run's current details show the live
turn. Runs recorded between the ``hartflow-turns-refresh`` patch and that one upserted the count at most every
:data:`TURNS_REFRESH` of workflow time instead; it is not a rule to keep: a worker that takes up a run may run a
task's code at another clock than a replay reads (``tests/test_replay_clock.py``), so a skip decided by the clock in
one could be an upsert in the other.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate, TypedSearchAttributes

from middlewares import patches
from middlewares.context import RunContext
from vocabulary.approvals import approval_markdown, is_approval
from vocabulary.human_input import request_markdown
from vocabulary.text import ELLIPSIS, one_line
from workflows import search_attributes as sa
from workflows.run.fields import RunFields
from workflows.run.io import RunStatus

TURNS_EVERY = 10
TURNS_REFRESH = timedelta(seconds=5)


class Visibility:
    """Keeps a run's search attributes and current details in step with its fields."""

    def __init__(self, ctx: RunContext, fields: RunFields) -> None:
        self._ctx = ctx
        self._fields = fields
        self._turns_upserted_at = workflow.info().start_time

    def set_status(self, status: RunStatus) -> None:
        self._fields.status = status
        self.sync_search_attributes(status_changed=True)
        self.update_details()

    def sync_search_attributes(self, *, status_changed: bool = False) -> None:
        """Bring the run's search attributes up to date: thread, user and model (whoever started the run),
        status, turns and stop reason. Only values that changed are upserted, so an unchanged run adds no
        history event."""
        ctx, status = self._ctx, self._fields.status
        if not ctx.patched(patches.VISIBILITY_SYNC):
            # Runs started before this patch upserted status and turns on each status change, and nothing else;
            # replaying them must issue exactly those commands.
            if status_changed:
                legacy: list[SearchAttributeUpdate[Any]] = [sa.STATUS.value_set(status), sa.TURNS.value_set(ctx.turn)]
                if ctx.stop_reason:
                    legacy.append(sa.STOP_REASON.value_set(ctx.stop_reason))
                workflow.upsert_search_attributes(legacy)
            return
        wanted: list[tuple[SearchAttributeKey[Any], str | int | None]] = [
            (sa.THREAD_ID, ctx.thread_id),
            (sa.USER_ID, ctx.user_id),
            (sa.MODEL, ctx.model),
            (sa.STATUS, status),
            (sa.TURNS, ctx.turn),
            (sa.STOP_REASON, ctx.stop_reason),
        ]
        current = workflow.info().typed_search_attributes
        updates = [key.value_set(value) for key, value in wanted if value is not None and current.get(key) != value]
        if not updates or (all(update.key == sa.TURNS for update in updates) and self._turns_wait(current)):
            return
        workflow.upsert_search_attributes(updates)
        self._turns_upserted_at = workflow.now()

    def _turns_wait(self, current: TypedSearchAttributes) -> bool:
        """Whether a change of the turn count alone waits for the next upsert."""
        if self._ctx.patched(patches.TURNS_BY_COUNT):
            return self._ctx.turn - (current.get(sa.TURNS) or 0) < TURNS_EVERY
        recent = workflow.now() - self._turns_upserted_at < TURNS_REFRESH
        return recent and self._ctx.patched(patches.TURNS_REFRESH)

    def update_details(self) -> None:
        ctx, fields = self._ctx, self._fields
        lines = [f"**Status:** {fields.status} · turn {ctx.turn}"]
        if fields.final_message and fields.status != "running":
            lines.append(f"**Answer:** {one_line(fields.final_message, 300, ELLIPSIS)}")
        if fields.last_tool:
            lines.append(f"**Last tool:** {fields.last_tool}")
        if ctx.stop_reason:
            lines.append(f"**Stop reason:** {ctx.stop_reason}")
        if fields.pending:
            lines.extend((approval_markdown if is_approval(fields.pending) else request_markdown)(fields.pending))
        if fields.running_subagents:
            lines.append(f"**Subagents running:** {', '.join(fields.running_subagents.values())}")
        if fields.notice:
            lines.append(f"**Notice:** {fields.notice}")
        workflow.set_current_details("\n\n".join(lines))
