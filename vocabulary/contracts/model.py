"""One model call (``activities/model.py``): the request, by value or as a transcript of the thread's blobs,
its retry budget, and the notice a failing attempt signals before Temporal retries it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import AIMessage, AnyMessage, SystemMessage

from vocabulary.activity_ref import ActivityRef
from vocabulary.contracts.thread import ThreadRef

ModelPurpose = Literal["agent", "title", "summarization", "memory", "input_polish", "suggestions"]


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
    live: LiveTokens | None = None
    """Publish the answer's tokens while they are generated (``vocabulary/live_tokens.py``); ``None``: don't."""
    breaker_gate: bool = False
    """Call the provider only if this worker knows the model's circuit breaker closed with no failures (asking it
    when its kept answer is stale); otherwise fail at once, not retried, with ``NOT_CLOSED_ERROR``
    (``vocabulary/breaker.py``). LLMErrorHandling sets it when it left the check to the call."""


@dataclass
class LiveTokens:
    """Where a model call publishes its live token batches (``vocabulary/live_tokens.py``)."""

    chain: str
    """The run chain's folder (``chain_prefix``)."""
    anchor: int
    """Stream offset of the ``model_call`` progress event announcing the call."""


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


MODEL_INVOKE = ActivityRef("model.invoke", ModelCallInput, AIMessage)
LLM_RETRY_SIGNAL = "llm_retry"
"""The run workflow's signal a ``model.invoke`` attempt sends before Temporal retries it (progress only)."""
