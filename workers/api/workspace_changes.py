"""``GET /threads/{id}/runs/{run_id}/workspace-changes``: what a run changed in the thread's files, as DeerFlow's
change badge asks (``bytedance/deer-flow: frontend/src/core/workspace-changes/api.ts``, shapes in ``types.ts``).

hartflow does not record per-run file changes, so any run id of the caller's thread answers DeerFlow's own
"nothing recorded" response (``available: false``, the empty summary; DeerFlow answers the same for a run without
a workspace-changes event: ``backend/packages/harness/deerflow/workspace_changes/api.py``), and the badge stays
hidden. The app also asks with the ids of turns a branch inherited (``workers/api/message_page.py`` names them by
their source run), which are no runs of the branch: those get the same answer, not a 404 the app would report.
Another user's thread, or an unknown one, is 404 like every thread route.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path

from workers.api.deps import Context, Thread

router = APIRouter()

_EMPTY_SUMMARY = {"created": 0, "modified": 0, "deleted": 0, "symlink_created": 0, "additions": 0, "deletions": 0}


@router.get("/threads/{thread_id}/runs/{run_id}/workspace-changes")
async def workspace_changes(
    run_id: Annotated[str, Path(max_length=256)],
    thread: Thread,
    context: Context,
    include_files: bool = True,
    include_diff: bool = True,
) -> dict[str, Any]:
    await context.ledger.require_thread(thread)
    return {
        "available": False,
        "version": 1,
        "summary": {**_EMPTY_SUMMARY, "truncated": False},
        "files": [],
        "limits": {},
    }
