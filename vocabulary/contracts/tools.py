"""A built-in tool call (``activities/tools.py``) and an oversized tool output saved where the sandbox sees it
(``activities/tool_output.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from vocabulary.activity_ref import ActivityRef
from vocabulary.contracts.thread import ThreadRef


@dataclass
class ToolCallInput:
    thread: ThreadRef
    tool_call: dict[str, Any]
    """``{"name", "args", "id"}`` as in an AIMessage's ``tool_calls``."""
    sandbox_id: str | None = None
    run_key: str = ""


@dataclass
class ToolCallOutput:
    content: str
    status: Literal["success", "error"] = "success"
    sandbox_id: str | None = None
    """The sandbox the tool ran in (acquired lazily by the first sandbox tool of a thread)."""
    artifact: Any = None
    sandbox_needs_release: bool = True
    """False when the sandbox's provider holds nothing a release would free (the local one): the run then skips
    its release. Results recorded before the field read as true, so their runs replay the release they made."""


@dataclass
class ExternalizeInput:
    """Save an oversized tool output where the thread's sandbox sees it (``path`` is a virtual path)."""

    thread: ThreadRef
    sandbox_id: str | None
    """The thread's live sandbox; without one, only providers that share the host's thread folders can save."""
    path: str
    content: str


@dataclass
class ExternalizeResult:
    saved: bool
    error: str | None = None


TOOL_EXECUTE = ActivityRef("tool.execute", ToolCallInput, ToolCallOutput)
TOOL_OUTPUT_EXTERNALIZE = ActivityRef("tool_output.externalize", ExternalizeInput, ExternalizeResult)
