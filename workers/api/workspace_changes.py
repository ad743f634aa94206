"""``GET /threads/{id}/runs/{run_id}/workspace-changes``: what a run changed in the thread's files, as DeerFlow's
change badge asks (``bytedance/deer-flow: frontend/src/core/workspace-changes/api.ts``, shapes in ``types.ts``).

hartflow does not record per-run file changes, so every run of the caller's answers DeerFlow's own "nothing
recorded" response (``available: false``, the empty summary; DeerFlow answers the same for a run without a
workspace-changes event: ``backend/packages/harness/deerflow/workspace_changes/api.py``), and the badge stays
hidden. An unknown run, or another user's, is 404 like every run route.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from workers.api.deps import Context, Thread

router = APIRouter()

_EMPTY_SUMMARY = {"created": 0, "modified": 0, "deleted": 0, "symlink_created": 0, "additions": 0, "deletions": 0}


@router.get("/threads/{thread_id}/runs/{run_id}/workspace-changes")
async def workspace_changes(
    run_id: str, thread: Thread, context: Context, include_files: bool = True, include_diff: bool = True
) -> dict[str, Any]:
    await context.ledger.run(thread, run_id)
    return {
        "available": False,
        "version": 1,
        "summary": {**_EMPTY_SUMMARY, "truncated": False},
        "files": [],
        "limits": {},
    }
