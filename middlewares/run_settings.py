"""Settings that shape one run. They travel in the run's input, so a run keeps them across replays,
worker restarts and continue-as-new even if the config file changes meanwhile."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field

from middlewares.settings import MiddlewareSettings
from vocabulary.delegation import SubagentsSettings


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelCallSettings(_Strict):
    """Timeouts of one model attempt. How many attempts, and the waits between them, are LLMErrorHandling's
    config (``middlewares.llm_error_handling.llm_call``), so the retry policy and the per-reason budget the
    activity enforces come from one place."""

    timeout_seconds: float = Field(default=600, gt=0, description="start-to-close timeout of one model attempt")
    heartbeat_seconds: float = Field(default=30, gt=0, description="a worker that dies mid-call is noticed after this")


class ToolCallSettings(_Strict):
    timeout_seconds: float = Field(900, gt=0, description="start-to-close timeout of one tool attempt")
    heartbeat_seconds: float = Field(30, gt=0)
    max_attempts: int = Field(3, ge=1, description="attempts when a tool activity itself fails")


class ModelCapabilities(_Strict):
    """What the run's model can do (DeerFlow declares these per model: ``supports_vision``, ``context_window``).
    Chain conditions and limits read them; nothing probes the provider."""

    vision: bool = Field(default=False, description="the model takes images: adds ViewImage and the view_image tool")
    max_input_tokens: int | None = Field(
        default=None, ge=1, description="context window; fraction-based summarization needs it"
    )


class RunSettings(_Strict):
    recursion_limit: int = Field(100, ge=1, le=10_000, description="model calls per run before it stops")
    plan_mode: bool = False
    non_interactive: bool = False
    subagent_enabled: bool = Field(
        False,
        description="offer the task tool: subagents run as child workflows, limited by SubagentLimit "
        "(off by default, as DeerFlow's subagent_enabled)",
    )
    subagents: SubagentsSettings = Field(default_factory=SubagentsSettings)
    clarification_timeout_seconds: float = Field(7 * 24 * 3600, gt=0)
    max_message_chars: int = Field(100_000, ge=1, description="longest user message a run accepts")
    model_call: ModelCallSettings = Field(default_factory=ModelCallSettings)
    tool_call: ToolCallSettings = Field(default_factory=ToolCallSettings)
    model_capabilities: ModelCapabilities = Field(default_factory=ModelCapabilities)
    middlewares: MiddlewareSettings = Field(default_factory=MiddlewareSettings)
    mcp_servers: list[str] = Field(
        default_factory=list,
        description="the enabled MCP servers whose tools this run gets; filled in from mcp.servers and "
        "mcp.config_file (setting it under run: is an error)",
    )
    extensions: list[str] = Field(
        default_factory=list,
        description="extra middlewares as 'module:Class' (zero-argument), placed after LoopDetection, before "
        "SafetyFinishReason and Clarification",
    )

    @property
    def clarification_timeout(self) -> timedelta:
        return timedelta(seconds=self.clarification_timeout_seconds)
