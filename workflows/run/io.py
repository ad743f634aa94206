"""What goes in and out of a run: its input, what it carries across continue-as-new, and the view clients see.

Defined apart from ``workflows/run/workflow.py`` because the delegation code starts child runs with the same input and
reads their view; ``workflows.run`` re-exports every name, which stays the import path for clients.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from temporalio.contrib.workflow_streams import WorkflowStreamState

from middlewares.run_settings import RunSettings
from vocabulary.contracts import CommitLineage, McpToolInfo, WebhookTarget
from vocabulary.contracts.configured_tools import ConfiguredToolInfo
from vocabulary.state import ThreadState
from vocabulary.transcript import TranscriptCursor
from workflows.run.delegation import SubagentTask

RunStatus = Literal["running", "awaiting_input", "awaiting_approval", "completed", "error", "cancelled"]


@dataclass
class CarriedRun:
    """What a run carries across continue-as-new: the state in memory and the run-scoped counters."""

    state: ThreadState
    version: int
    turn: int
    model_calls: int
    call_counts: dict[str, int]
    stop_reason: str | None
    sandbox_id: str | None
    memory: dict[str, dict[str, Any]] = field(default_factory=dict)
    stream: WorkflowStreamState | None = None
    """The progress stream (its events and offsets), so a subscriber reads on across the continue-as-new."""
    transcript: TranscriptCursor | None = None
    """The last model request's message ids and manifest: the continued run sends only what is new."""
    mcp_tools: list[McpToolInfo] | None = None
    """The MCP tools this run discovered: the continued run keeps them instead of asking the servers again."""
    configured_tools: list[ConfiguredToolInfo] | None = None
    """The configured tools this run was described: the continued run keeps them."""
    lineage: CommitLineage | None = None
    """Where the run's state came from, until its first commit records it."""
    sandbox_needs_release: bool = True
    """Whether the provider of ``sandbox_id`` holds anything a release would free (``SandboxLease``)."""


@dataclass
class RunInput:
    thread_id: str
    message: str
    model: str
    user_id: str = "default"
    settings: RunSettings = field(default_factory=RunSettings)
    message_id: str | None = None
    files: list[str] = field(default_factory=list)
    file_entries: list[dict[str, Any]] | None = None
    """DeerFlow's entries for ``files`` (``{filename, size, path, status}``, as its app sends them): the message
    keeps these in ``additional_kwargs["files"]`` instead of the bare names, so the app shows its file cards."""
    carried: CarriedRun | None = None
    subagent: SubagentTask | None = None
    """Set when this run is a subagent (``workflows/run/subagent.py``) working on a lead run's ``task`` call."""
    base_version: int | None = None
    """Start from this committed version of the thread instead of the newest (a fork, ``ThreadLoadInput``)."""
    rerun_of: int | None = None
    """The version whose human message this run reruns from the same base (regenerate): it shares its input."""
    title: str | None = None
    """A title the run's state starts with (a client keeping a renamed title across a fork)."""
    images: list[str] = field(default_factory=list)
    """Which of ``files`` are images the model sees with the message (a vision model: ``middlewares/view_image.py``)."""
    webhook: WebhookTarget | None = None
    """Where the run's final view is POSTed when it ends (``workflows/run/webhook.py``)."""


@dataclass
class RunView:
    """A run as clients see it: the ``status`` query, the ``wait_settled`` update and the run's result."""

    thread_id: str
    run_id: str
    workflow_id: str
    status: RunStatus
    stop_reason: str | None
    final_message: str | None
    pending_input: dict[str, Any] | None
    turns: int
    model: str
    usage: dict[str, int] | None = None
    """The run's token totals (``input_tokens``, ``output_tokens``, ``total_tokens``); ``None`` when
    TokenUsage is off."""
    chain: list[str] = field(default_factory=list)
    """The run's middleware chain, outermost first (empty in results of runs from before it was recorded)."""


@dataclass
class ReplyInput:
    answer: str | None = None
    option_id: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    request_id: str | None = None
