"""Everything a run changes while it runs, in one place: the run workflow owns one :class:`RunFields` and hands
it to the collaborators that read or write it (the tool turn, the pause, delegation, visibility, the view).

The turn, stop reason and call counts (``progress``) are here too, and the run context reads them: hooks see them
there read-only, and stop the run through ``RunContext.stop``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from middlewares.context import RunProgress
from vocabulary.contracts import CommitLineage, McpToolInfo
from vocabulary.contracts.configured_tools import ConfiguredToolInfo
from vocabulary.human_input import Reply
from vocabulary.messages import MessageMerger
from vocabulary.state import StateUpdate, ThreadState, apply_update
from vocabulary.transcript import TranscriptCursor
from workflows.run.io import RunStatus


@dataclass
class RunFields:
    """The run's mutable fields. Queries read them; only workflow code (the run and its collaborators) writes."""

    progress: RunProgress = field(default_factory=RunProgress)
    """Turn, stop reason and model-call counts, shared with the run context (carried across continue-as-new)."""
    state: ThreadState = field(default_factory=ThreadState)
    """The thread state as of the last step: whatever ends the loop leaves it for after_agent and the commit."""
    version: int = 0
    """The thread's stored version, from the load and each commit (the next commit's precondition)."""
    lineage: CommitLineage | None = None
    """Where the loaded state came from (its version, the run's message), recorded by the run's first commit."""
    status: RunStatus = "running"
    pending: dict[str, Any] | None = None
    """The clarification or approval request the run waits on (``pending_input``), while it waits."""
    reply: Reply | None = None
    """The accepted reply to ``pending``, until the pause turns it into a message."""
    decisions: dict[str, dict[str, Any]] | None = None
    """The decisions taken so far on the pending approval request, by tool call id (``workflows/run/approval.py``)."""
    final_message: str | None = None
    model_calls: int = 0
    """Model calls of this run (carried across continue-as-new): the recursion limit counts them."""
    last_tool: str | None = None
    notice: str | None = None
    """Why the last clarification_reply signal was ignored (shown in the current details until a reply lands)."""
    running_subagents: dict[str, str] = field(default_factory=dict)
    """Subagents this run waits for: child workflow id → task description (current details)."""
    transcript: TranscriptCursor = field(default_factory=TranscriptCursor)
    """The last model request's message ids and manifest: the next request sends only what is new."""
    mcp_tools: list[McpToolInfo] | None = None
    """The MCP tools this run discovered (or carried), when it has MCP servers."""
    configured_tools: list[ConfiguredToolInfo] | None = None
    """The configured tools this run was described (or carried), when its settings name any."""
    continue_as_new_requested: bool = False

    merge_messages: MessageMerger = field(default_factory=MessageMerger)
    """The ``messages`` reducer of this run's merges (it keeps the last one's id index)."""

    def apply(self, update: StateUpdate, new_id: Callable[[], str]) -> None:
        """Merge ``update`` into the state through the reducers (``new_id`` names messages without an id)."""
        self.state = apply_update(self.state, update, new_id=new_id, merge_messages=self.merge_messages)
