"""The ``delegations`` ledger: entries for the current run's ``task`` calls and their results (DeerFlow's
DurableContext delegation capture, ``middlewares/durable_context.py``), which SubagentLimit counts; the statuses
and keys are DeerFlow's subagent status contract (``vocabulary/delegation.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from vocabulary.delegation import (
    SUBAGENT_RESULT_BRIEF_KEY,
    SUBAGENT_RESULT_SHA256_KEY,
    SUBAGENT_STATUS_KEY,
    SUBAGENT_STOP_REASON_KEY,
    TASK_TOOL_NAME,
)
from vocabulary.messages import AppendedMessages


class DelegationLedger:
    """One run's ``delegations`` ledger, captured each turn: while the conversation only grows
    (:class:`vocabulary.messages.AppendedMessages`) it reads the new messages alone, so a turn's work does not grow
    with the conversation; otherwise (a summary replaced messages) it reads them all again."""

    def __init__(self, run_id: str) -> None:
        self._run_id = run_id
        self._appended = AppendedMessages()
        self._entries: dict[str, dict[str, Any]] = {}
        """By call id, as :meth:`capture` returns them but for ``created_at`` (set on return)."""

    def capture(
        self, messages: Sequence[BaseMessage], existing: Sequence[Mapping[str, Any]], *, now: str
    ) -> list[dict[str, Any]]:
        """Ledger entries for this run's ``task`` calls (``in_progress``) and their results (the contract's
        status), only those that differ from ``existing``; the ``delegations`` reducer keeps terminal statuses."""
        start = self._appended.start(messages)
        if start == 0:
            self._entries = {}
        for message in messages[start:]:
            self._take(message)
        known = {str(entry.get("id")): entry for entry in existing}
        return [
            {**entry, "created_at": now}
            for entry_id, entry in self._entries.items()
            if not _same_entry(known.get(entry_id), entry)
        ]

    def _take(self, message: BaseMessage) -> None:
        entries = self._entries
        if isinstance(message, HumanMessage) and message.additional_kwargs.get("run_id") == self._run_id:
            # DeerFlow's run boundary: the run's messages are those after its user message (ThreadData stamps it
            # with the run id), all of them when none is stamped.
            entries.clear()
        elif isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call["name"] == TASK_TOOL_NAME and call.get("id"):
                    args = call.get("args") or {}
                    entries[str(call["id"])] = {
                        "id": str(call["id"]),
                        "run_id": self._run_id,
                        "description": str(args.get("description") or ""),
                        "subagent_type": str(args.get("subagent_type") or "general-purpose"),
                        "status": "in_progress",
                        "created_at": None,
                    }
        elif isinstance(message, ToolMessage) and message.tool_call_id in entries:
            kwargs = message.additional_kwargs
            status = kwargs.get(SUBAGENT_STATUS_KEY)
            if isinstance(status, str):
                entry = entries[message.tool_call_id]
                entry["status"] = status
                for field, key in (
                    ("result_brief", SUBAGENT_RESULT_BRIEF_KEY),
                    ("result_sha256", SUBAGENT_RESULT_SHA256_KEY),
                    ("stop_reason", SUBAGENT_STOP_REASON_KEY),
                ):
                    if isinstance(kwargs.get(key), str):
                        entry[field] = kwargs[key]


def _same_entry(known: Mapping[str, Any] | None, entry: Mapping[str, Any]) -> bool:
    if known is None:
        return False
    return all(known.get(key) == value for key, value in entry.items() if key != "created_at") or (
        # A terminal entry is never downgraded: re-seeing its dispatch is no change.
        entry["status"] == "in_progress" and known.get("status") != "in_progress"
    )
