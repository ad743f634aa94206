"""Search attributes hartflow registers, so the Web UI can filter runs (``HartflowStatus="awaiting_input"``)."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

THREAD_ID = SearchAttributeKey.for_keyword("HartflowThreadId")
USER_ID = SearchAttributeKey.for_keyword("HartflowUserId")
STATUS = SearchAttributeKey.for_keyword("HartflowStatus")
STOP_REASON = SearchAttributeKey.for_keyword("HartflowStopReason")
MODEL = SearchAttributeKey.for_keyword("HartflowModel")
TURNS = SearchAttributeKey.for_int("HartflowTurns")

ALL = (THREAD_ID, USER_ID, STATUS, STOP_REASON, MODEL, TURNS)
