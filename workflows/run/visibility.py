"""What the Temporal Web UI shows of a run while it runs: its search attributes and its current details.

A mixin of the run workflow (``workflows/run/workflow.py``): it reads the run's fields and writes only visibility.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate

from middlewares.context import TemporalRunContext
from vocabulary.human_input import request_markdown
from vocabulary.text import ELLIPSIS, one_line
from workflows import search_attributes as sa
from workflows.run.io import RunStatus

_VISIBILITY_PATCH = "hartflow-visibility-sync"


class RunVisibility:
    """Keeps a run's search attributes and current details in step with its status."""

    _ctx: TemporalRunContext
    _status: RunStatus
    _final_message: str | None
    _last_tool: str | None
    _pending: dict[str, Any] | None
    _running_subagents: dict[str, str]
    _notice: str | None

    def _set_status(self, status: RunStatus) -> None:
        self._status = status
        self._sync_search_attributes(status_changed=True)
        self._update_details()

    def _sync_search_attributes(self, *, status_changed: bool = False) -> None:
        """Bring the run's search attributes up to date: thread, user and model (whoever started the run),
        status, turns and stop reason. Only values that changed are upserted, so an unchanged run adds no
        history event."""
        ctx = self._ctx
        if not workflow.patched(_VISIBILITY_PATCH):
            # Runs started before this patch upserted status and turns on each status change, and nothing else;
            # replaying them must issue exactly those commands.
            if status_changed:
                legacy: list[SearchAttributeUpdate[Any]] = [
                    sa.STATUS.value_set(self._status),
                    sa.TURNS.value_set(ctx.turn),
                ]
                if ctx.stop_reason:
                    legacy.append(sa.STOP_REASON.value_set(ctx.stop_reason))
                workflow.upsert_search_attributes(legacy)
            return
        wanted: list[tuple[SearchAttributeKey[Any], str | int | None]] = [
            (sa.THREAD_ID, ctx.thread_id),
            (sa.USER_ID, ctx.user_id),
            (sa.MODEL, ctx.model),
            (sa.STATUS, self._status),
            (sa.TURNS, ctx.turn),
            (sa.STOP_REASON, ctx.stop_reason),
        ]
        current = workflow.info().typed_search_attributes
        updates = [key.value_set(value) for key, value in wanted if value is not None and current.get(key) != value]
        if updates:
            workflow.upsert_search_attributes(updates)

    def _update_details(self) -> None:
        ctx = self._ctx
        lines = [f"**Status:** {self._status} · turn {ctx.turn}"]
        if self._final_message and self._status != "running":
            lines.append(f"**Answer:** {one_line(self._final_message, 300, ELLIPSIS)}")
        if self._last_tool:
            lines.append(f"**Last tool:** {self._last_tool}")
        if ctx.stop_reason:
            lines.append(f"**Stop reason:** {ctx.stop_reason}")
        if self._pending:
            lines.extend(request_markdown(self._pending))
        if self._running_subagents:
            lines.append(f"**Subagents running:** {', '.join(self._running_subagents.values())}")
        if self._notice:
            lines.append(f"**Notice:** {self._notice}")
        workflow.set_current_details("\n\n".join(lines))
