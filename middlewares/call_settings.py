"""The run's call settings (``run.model_call``, ``run.tool_call``) and its model's capabilities: plain config
models, apart from ``middlewares/run_settings.py`` so the run context (``middlewares/context.py``) can name the
capabilities without importing every middleware's config, which the run settings do."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelCallSettings(_Strict):
    """Timeouts of one model attempt. How many attempts, and the waits between them, are LLMErrorHandling's
    config (``middlewares.llm_error_handling.llm_call``), so the retry policy and the per-reason budget the
    activity enforces come from one place."""

    timeout_seconds: float = Field(default=600, gt=0, description="start-to-close timeout of one model attempt")
    heartbeat_seconds: float = Field(default=30, gt=0, description="a worker that dies mid-call is noticed after this")
    stream_tokens: bool = Field(
        default=True,
        description="publish the lead agent's answer while it is generated (live tokens); false: in one piece",
    )


class ToolCallSettings(_Strict):
    timeout_seconds: float = Field(900, gt=0, description="start-to-close timeout of one tool attempt")
    heartbeat_seconds: float = Field(30, gt=0)
    max_attempts: int = Field(3, ge=1, description="attempts when a tool activity itself fails")


class ModelCapabilities(_Strict):
    """What the run's model can do (DeerFlow declares these per model: ``supports_vision``, ``supports_thinking``,
    ``supports_reasoning_effort``, ``context_window``). Chain conditions and limits read them, and DeerFlow's
    model picker (``GET /api/models``, ``workers/api/models_route.py``); nothing probes the provider. Set here for
    the ``model:`` shorthand; a ``models`` entry's own keys take their place for a run on that entry."""

    vision: bool = Field(default=False, description="the model takes images: adds ViewImage and the view_image tool")
    thinking: bool = Field(
        default=False,
        description="the model can think before answering: DeerFlow's app offers its Reasoning, Pro and Ultra modes",
    )
    reasoning_effort: bool = Field(default=False, description="the model takes a reasoning effort (DeerFlow's app)")
    max_input_tokens: int | None = Field(
        default=None, ge=1, description="context window; fraction-based summarization needs it"
    )
