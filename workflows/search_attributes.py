"""Search attributes hartflow registers, so the Web UI can filter runs (``HartflowStatus="awaiting_input"``)."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

THREAD_ID = SearchAttributeKey.for_keyword("HartflowThreadId")
USER_ID = SearchAttributeKey.for_keyword("HartflowUserId")
STATUS = SearchAttributeKey.for_keyword("HartflowStatus")
STOP_REASON = SearchAttributeKey.for_keyword("HartflowStopReason")
MODEL = SearchAttributeKey.for_keyword("HartflowModel")
TURNS = SearchAttributeKey.for_int("HartflowTurns")

ALL = (THREAD_ID, USER_ID, STATUS, STOP_REASON, MODEL, TURNS)


def run_start(thread_id: str, user_id: str, model: str) -> TypedSearchAttributes:
    """What a run starts with: every key but ``STOP_REASON`` (the run keeps ``STATUS`` and ``TURNS`` current and
    sets its stop reason at the end). Every start uses it: ``workers/client/runs.py``, ``workflows/thread_queue.py``."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(THREAD_ID, thread_id),
            SearchAttributePair(USER_ID, user_id),
            SearchAttributePair(STATUS, "running"),
            SearchAttributePair(MODEL, model),
            SearchAttributePair(TURNS, 0),
        ]
    )
