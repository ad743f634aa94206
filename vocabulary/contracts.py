"""The contract between workflow code and activities: activity names and their one-in/one-out dataclasses.

The workflow owns this contract and the activities implement it. It lives here (not in ``activities/``)
so that workflow and middleware code can name an activity and build its input without importing the
activity implementations, which pull in boto3, kubernetes and HTTP clients that workflow code must never
reach.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from langchain_core.messages import AIMessage, AnyMessage, SystemMessage
from temporalio.contrib.workflow_streams import WorkflowStreamState

from vocabulary.breaker import BreakerReport, Phase
from vocabulary.state import ThreadState

THREAD_LOAD = "thread.load"
THREAD_COMMIT = "thread.commit"
RUN_ARCHIVE = "run.archive"
"""Stores a closed run's final view and whole workflow stream (``activities/run_archive.py``)."""
MODEL_INVOKE = "model.invoke"
LLM_BREAKER_CHECK = "llm_breaker.check"
LLM_BREAKER_REPORT = "llm_breaker.report"
LLM_RETRY_SIGNAL = "llm_retry"
"""The run workflow's signal a ``model.invoke`` attempt sends before Temporal retries it (progress only)."""
TOOL_EXECUTE = "tool.execute"
TOOL_OUTPUT_EXTERNALIZE = "tool_output.externalize"
THREAD_ENSURE_DIRS = "thread.ensure_dirs"
UPLOADS_LIST = "uploads.list"
SANDBOX_RELEASE = "sandbox.release"
SANDBOX_ACQUIRE = "sandbox.acquire"
SANDBOX_INVENTORY = "sandbox.inventory"
SANDBOX_RUN_STATES = "sandbox.run_states"
GUARDRAIL_EVALUATE = "guardrail.evaluate"
MEMORY_LOAD = "memory.load"
MEMORY_READ = "memory.read"
MEMORY_SAVE = "memory.save"
MEMORY_ENQUEUE = "memory.enqueue"
MEMORY_WORKFLOW = "HartflowMemory"
MEMORY_WORKFLOW_ID_PREFIX = "hartflow-memory-"
"""The per-user memory workflow's id is this prefix and the user id: one memory queue per user."""
MEMORY_ENQUEUE_SIGNAL = "enqueue"
IMAGE_INSPECT = "image.inspect"
IMAGE_LOAD = "image.load"
SKILL_LOAD = "skills.load"
MCP_LIST_TOOLS = "mcp.list_tools"
MCP_CALL_TOOL = "mcp.call_tool"


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
class RunArchiveInput:
    """A run that has ended, as its last activity stores it: ``view`` is its final ``RunView`` as a dict,
    ``stream`` its whole workflow stream (every topic, offsets from ``stream.base_offset``), ``version`` the
    thread version its final commit stored (0 for a run that commits nothing, a subagent)."""

    thread: ThreadRef
    run_id: str
    workflow_id: str
    view: dict[str, Any]
    stream: WorkflowStreamState
    version: int
    part: int = 0
    parts: int = 1
    """A stream too large for one activity input goes in ``parts`` calls: parts ``0 .. parts-2`` carry a slice
    of the stream only (``view`` empty), the last one the rest and the view (``activities/run_archive.py``)."""


@dataclass
class LlmRetryBudget:
    """How ``model.invoke`` retries (DeerFlow's ``llm_call``): total attempts, and the jittered backoff used when
    the provider sends no Retry-After. Per-reason budgets (burst-rate, stream timeouts) only tighten it."""

    max_attempts: int = 3
    base_delay_ms: int = 1000
    cap_delay_ms: int = 8000
    burst_base_delay_ms: int = 5000


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
    retry: LlmRetryBudget = field(default_factory=LlmRetryBudget)
    retry_signal: str | None = None
    """Signal the calling workflow with an :class:`LlmRetryNotice` before each retry (``None``: don't)."""
    transcript: TranscriptRef | None = None
    """The request's messages by reference (``messages`` is then empty): the agent's calls send only what is new
    since the previous request, so a turn's history cost does not grow with the conversation."""


@dataclass
class TranscriptRef:
    """A model request's message list as content-addressed blobs of the thread (``vocabulary/transcript.py``).

    The list is the first ``keep`` messages of the stored manifest ``base`` followed by ``append``; the
    activity stores ``bodies`` (the messages the store may not have yet), then the manifest of the new list,
    whose id must come out as ``digest``."""

    thread: ThreadRef
    base: str | None
    """Manifest id of the previous request's list; ``None``: start from an empty list."""
    keep: int
    append: list[str]
    """Message ids (sha256 of the canonical JSON) after the kept prefix."""
    bodies: dict[str, str]
    """Canonical JSON by message id, for the appended messages the previous request did not carry."""
    digest: str
    """Manifest id of the resulting list, computed by the workflow: the activity checks it."""
    depth: int = 0
    """How the new manifest is stored: 0 as the full id list; n >= 1 as a delta on ``base`` (``keep`` and
    ``append``). The workflow restarts at 0 every ``FULL_MANIFEST_EVERY`` requests, so a cold read follows a
    bounded chain while a turn writes only what changed."""
    base_depth: int = 0
    """How ``base`` is stored (its ``depth`` when it was written): 0 in full, n >= 1 as a delta."""
    preamble: str | None = None
    """The sha256 of the request's system message and tool schemas (``vocabulary/transcript.py``), sent once per
    run instead of inline with every request; ``ModelCallInput.system_message`` and ``tools`` are then empty."""
    preamble_body: str | None = None
    """The preamble's JSON, when the previous request of the run did not send the same one."""


@dataclass
class LlmRetryNotice:
    """DeerFlow's ``llm_retry`` stream event, sent by the activity that failed and will be retried."""

    attempt: int
    max_attempts: int
    wait_ms: int
    reason: str
    message: str


@dataclass
class BreakerCheckInput:
    model: str
    holder: str
    """Who would hold the half-open probe: the run and its turn."""
    probe_lease_seconds: float
    """Release the probe after this long if the holder never reports (it vanished)."""


@dataclass
class BreakerCheckResult:
    admitted: bool
    probe: bool = False
    """The caller holds the half-open probe: it must report the outcome, or release the probe."""
    report_success: bool = False
    """The breaker has something a success resets (failures, or a probe), so a success must be reported."""
    phase: Phase = "closed"
    retry_in_seconds: float = 0.0
    """For a denied call: how long until the breaker may admit one again."""


@dataclass
class BreakerReportInput:
    model: str
    report: BreakerReport


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
    sandbox_id: str | None
    """``None``: the sandbox the worker's provider gives this thread (a run cancelled during its first sandbox
    call never learnt the id)."""


@dataclass
class SandboxAcquireInput:
    thread: ThreadRef


@dataclass
class SandboxAcquireResult:
    sandbox_id: str


@dataclass
class SandboxRecord:
    """One sandbox (a Kubernetes pod) as the sweeper and ``hartflow sandboxes list`` see it."""

    sandbox_id: str
    pod: str
    user_id: str
    thread_id: str
    workflow_id: str
    """The run workflow that acquired it; empty when unknown."""
    created_at: datetime | None
    ready: bool


@dataclass
class SandboxInventory:
    sandboxes: list[SandboxRecord]


@dataclass
class RunStatesInput:
    workflow_ids: list[str]


@dataclass
class RunStates:
    states: dict[str, Literal["running", "closed", "missing"]]
    """Per workflow id: its latest execution is running, has closed, or never existed."""


@dataclass
class GuardrailRequest:
    """One tool call as a guardrail provider sees it (DeerFlow's ``GuardrailRequest``, same fields)."""

    tool_name: str
    tool_input: dict[str, Any]
    agent_id: str | None = None
    """The configured ``guardrails.passport``."""
    thread_id: str | None = None
    is_subagent: bool = False
    timestamp: str = ""
    """UTC ISO-8601, from the run's clock."""
    user_id: str | None = None
    user_role: str | None = None
    oauth_provider: str | None = None
    oauth_id: str | None = None
    run_id: str | None = None
    tool_call_id: str | None = None
    channel_user_id: str | None = None
    is_internal: bool = False
    authz_attributes: dict[str, Any] = field(default_factory=dict)


@dataclass
class GuardrailReason:
    code: str
    message: str = ""


@dataclass
class GuardrailDecision:
    allow: bool
    reasons: list[GuardrailReason] = field(default_factory=list)
    policy_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class GuardrailEvaluateInput:
    """Evaluate ``request`` with the custom provider class ``use`` (``module:Class``) built from ``config``."""

    use: str
    config: dict[str, Any]
    request: GuardrailRequest


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


@dataclass
class ThreadDirsInput:
    thread: ThreadRef


@dataclass
class ThreadDirsResult:
    created: list[str]
    """The user-data folders, relative to the storage home."""


@dataclass
class UploadsListInput:
    thread: ThreadRef
    filenames: list[str]
    """Names in the thread's uploads folder; names with path components are ignored."""
    outline_limit: int = 10
    """Outlines are read for the first ``outline_limit`` present files only (those the prompt lists)."""


@dataclass
class OutlineEntry:
    title: str
    line: int
    """1-based line of the heading in the sibling ``.md``."""


@dataclass
class UploadedFile:
    filename: str
    size: int
    """Bytes on disk."""
    outline: list[OutlineEntry] = field(default_factory=list)
    outline_truncated: bool = False
    outline_preview: list[str] = field(default_factory=list)
    """First lines of the ``.md`` when it has no headings."""


@dataclass
class UploadsListResult:
    files: list[UploadedFile]
    """The requested files that exist as regular files, in request order."""


@dataclass
class MemoryLoadInput:
    user_id: str
    max_tokens: int = 2000
    """DeerFlow's ``memory.max_injection_tokens``: the formatted memory is cut to this many tokens."""


@dataclass
class MemoryContext:
    content: str
    """The user's memory formatted for injection (without the ``<memory>`` tags); empty: nothing to inject."""


@dataclass
class MemoryUpdateSettings:
    """How the memory workflow treats a queued conversation (from the run's ``middlewares.memory``)."""

    model: str
    """Model spec of the extraction call."""
    debounce_seconds: float = 30
    fact_confidence_threshold: float = 0.7
    max_facts: int = 100


@dataclass
class MemoryItem:
    """One run's conversation (user turns and final answers only) queued for memory extraction."""

    id: str
    """The run's ``{workflow id}/{run id}``: a retried enqueue is recognised and dropped."""
    thread_id: str
    messages: list[AnyMessage]
    settings: MemoryUpdateSettings


@dataclass
class MemoryEnqueueInput:
    user_id: str
    item: MemoryItem


@dataclass
class MemoryWorkflowInput:
    user_id: str
    pending: list[MemoryItem] = field(default_factory=list)
    """Conversations queued but not yet extracted (carried across continue-as-new)."""
    model_calls: int = 0
    """Extraction calls made so far: the next call's ``call_index``."""
    extractions: int = 0
    seen: list[str] = field(default_factory=list)
    """Ids of the most recently accepted items."""


@dataclass
class MemoryReadInput:
    user_id: str


@dataclass
class MemoryDocument:
    data: dict[str, Any]
    """The user's memory document (``activities/memory_store.py`` describes its shape)."""


@dataclass
class MemorySaveInput:
    user_id: str
    data: dict[str, Any]


@dataclass
class ImageInspectInput:
    thread: ThreadRef
    path: str
    """The virtual path the model asked ``view_image`` for."""


@dataclass
class ImageInspectResult:
    """What ``view_image`` records about an image, or the ``Error: ...`` text the model gets instead."""

    error: str | None = None
    mime_type: str = ""
    size: int = 0
    sha256: str = ""
    actual_path: str = ""
    """The file relative to the storage home."""


@dataclass
class ViewedImage:
    path: str
    mime_type: str
    size: int
    sha256: str | None = None


@dataclass
class ImageLoadInput:
    thread: ThreadRef
    images: list[ViewedImage]


@dataclass
class ImageLoadResult:
    data_urls: list[str | None]
    """Per requested image, in order: a ``data:`` URL, or ``None`` when the file is gone, changed or too big."""


@dataclass
class SkillLoadInput:
    name: str
    available: list[str] | None = None
    """The skills this agent may activate; ``None``: every enabled skill."""


SkillLoadStatus = Literal["loaded", "not_installed", "disabled", "not_available", "unreadable"]


@dataclass
class SkillLoadResult:
    status: SkillLoadStatus
    category: str = ""
    """``public`` or ``custom``."""
    container_path: str = ""
    """Where the SKILL.md appears inside a sandbox, e.g. ``/mnt/skills/public/pdf/SKILL.md``."""
    content: str = ""
    sha256: str = ""
    """Hex digest of the UTF-8 content."""


@dataclass
class McpListToolsInput:
    servers: list[str]
    """Names of the servers to ask, as the worker's config spells them."""


@dataclass
class McpToolInfo:
    server: str
    name: str
    """The name the model sees (``<server>_<tool>`` unless the server sets ``tool_name_prefix: false``)."""
    remote_name: str
    description: str
    input_schema: dict[str, Any]


@dataclass
class McpServerTools:
    server: str
    tools: list[McpToolInfo] = field(default_factory=list)
    error: str | None = None
    """Why the server gave no tools (it could not start, or failed to list): names the server, no secrets."""


@dataclass
class McpListToolsResult:
    servers: list[McpServerTools]


@dataclass
class McpCallInput:
    thread: ThreadRef
    server: str
    tool: str
    """The tool's name on the server."""
    name: str
    """The tool's name in the run (for file names and messages)."""
    args: dict[str, Any]


@dataclass
class McpCallOutput:
    content: str
    """The result's blocks as text (``activities/mcp/content.py``)."""
    is_error: bool = False
    viewed_images: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Images the result carried, stored under the thread's outputs: ``viewed_images`` records (ViewImage's)."""


__all__ = [
    "GUARDRAIL_EVALUATE",
    "IMAGE_INSPECT",
    "IMAGE_LOAD",
    "LLM_BREAKER_CHECK",
    "LLM_BREAKER_REPORT",
    "LLM_RETRY_SIGNAL",
    "MCP_CALL_TOOL",
    "MCP_LIST_TOOLS",
    "MEMORY_ENQUEUE",
    "MEMORY_ENQUEUE_SIGNAL",
    "MEMORY_LOAD",
    "MEMORY_READ",
    "MEMORY_SAVE",
    "MEMORY_WORKFLOW",
    "MEMORY_WORKFLOW_ID_PREFIX",
    "MODEL_INVOKE",
    "RUN_ARCHIVE",
    "SANDBOX_ACQUIRE",
    "SANDBOX_INVENTORY",
    "SANDBOX_RELEASE",
    "SANDBOX_RUN_STATES",
    "SKILL_LOAD",
    "THREAD_COMMIT",
    "THREAD_ENSURE_DIRS",
    "THREAD_LOAD",
    "TOOL_EXECUTE",
    "TOOL_OUTPUT_EXTERNALIZE",
    "UPLOADS_LIST",
    "AIMessage",
    "BreakerCheckInput",
    "BreakerCheckResult",
    "BreakerReportInput",
    "ExternalizeInput",
    "ExternalizeResult",
    "GuardrailDecision",
    "GuardrailEvaluateInput",
    "GuardrailReason",
    "GuardrailRequest",
    "ImageInspectInput",
    "ImageInspectResult",
    "ImageLoadInput",
    "ImageLoadResult",
    "LlmRetryBudget",
    "LlmRetryNotice",
    "McpCallInput",
    "McpCallOutput",
    "McpListToolsInput",
    "McpListToolsResult",
    "McpServerTools",
    "McpToolInfo",
    "MemoryContext",
    "MemoryDocument",
    "MemoryEnqueueInput",
    "MemoryItem",
    "MemoryLoadInput",
    "MemoryReadInput",
    "MemorySaveInput",
    "MemoryUpdateSettings",
    "MemoryWorkflowInput",
    "ModelCallInput",
    "ModelPurpose",
    "OutlineEntry",
    "RunArchiveInput",
    "RunStates",
    "RunStatesInput",
    "SandboxAcquireInput",
    "SandboxAcquireResult",
    "SandboxInventory",
    "SandboxRecord",
    "SandboxReleaseInput",
    "SkillLoadInput",
    "SkillLoadResult",
    "SkillLoadStatus",
    "ThreadCommitInput",
    "ThreadCommitResult",
    "ThreadDirsInput",
    "ThreadDirsResult",
    "ThreadLoadInput",
    "ThreadRef",
    "ThreadSnapshot",
    "ToolCallInput",
    "ToolCallOutput",
    "TranscriptRef",
    "UploadedFile",
    "UploadsListInput",
    "UploadsListResult",
    "ViewedImage",
]
