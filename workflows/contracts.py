"""The contract between workflow code and activities: activity names and their one-in/one-out dataclasses.

The workflow owns this contract and the activities implement it. It lives here (not in ``activities/``)
so that workflow and middleware code can name an activity and build its input without importing the
activity implementations, which pull in boto3, kubernetes and HTTP clients that must stay out of the
workflow sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import AIMessage, AnyMessage, SystemMessage

from workflows.state import ThreadState

THREAD_LOAD = "thread.load"
THREAD_COMMIT = "thread.commit"
MODEL_INVOKE = "model.invoke"
TOOL_EXECUTE = "tool.execute"
SANDBOX_RELEASE = "sandbox.release"

ModelPurpose = Literal["agent", "title", "summarization", "memory"]


@dataclass
class ThreadRef:
    user_id: str
    thread_id: str


@dataclass
class ThreadLoadInput:
    thread: ThreadRef


@dataclass
class ThreadSnapshot:
    state: ThreadState
    version: int
    """The store's version of this state; 0 for a thread that has never been committed."""


@dataclass
class ThreadCommitInput:
    thread: ThreadRef
    state: ThreadState
    expected_version: int
    run_id: str


@dataclass
class ThreadCommitResult:
    version: int


@dataclass
class ModelCallInput:
    model: str
    """The model spec string, e.g. ``scripted:/path/script.json`` or ``openai:gpt-4o-mini``."""
    messages: list[AnyMessage]
    system_message: SystemMessage | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    """Tool schemas in OpenAI function format."""
    purpose: ModelPurpose = "agent"
    call_index: int = 0
    """0-based index of this call among the run's calls for ``purpose`` (scripted models key on it)."""
    run_key: str = ""
    """Identifies the run (workflow id + first run id) for providers that keep per-run state."""


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


@dataclass
class SandboxReleaseInput:
    thread: ThreadRef
    sandbox_id: str


__all__ = [
    "MODEL_INVOKE",
    "SANDBOX_RELEASE",
    "THREAD_COMMIT",
    "THREAD_LOAD",
    "TOOL_EXECUTE",
    "AIMessage",
    "ModelCallInput",
    "ModelPurpose",
    "SandboxReleaseInput",
    "ThreadCommitInput",
    "ThreadCommitResult",
    "ThreadLoadInput",
    "ThreadRef",
    "ThreadSnapshot",
    "ToolCallInput",
    "ToolCallOutput",
]
