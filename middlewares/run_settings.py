"""Settings that shape one run. They travel in the run's input, so a run keeps them across replays,
worker restarts and continue-as-new even if the config file changes meanwhile."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field
from temporalio.common import RetryPolicy

from middlewares.call_settings import ModelCallSettings, ModelCapabilities, ToolCallSettings
from middlewares.context import ActivityOptions, ModelCallPolicy, ToolCallPolicy
from middlewares.llm_error_handling import model_retry_policy, retry_budget
from middlewares.settings import MiddlewareSettings
from vocabulary.delegation import SubagentsSettings

__all__ = ["ModelCallSettings", "ModelCapabilities", "RunSettings", "ToolCallSettings"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


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
    tools: list[str] | None = Field(
        None,
        description="the configured tools (tools:) this run gets, by name; unset = every built-in sandbox tool and "
        "no configured ones. Filled in from tools and a custom agent's tool_groups (setting it under run: is an error)",
    )
    agent_name: str | None = Field(
        None, description="the custom agent this run is (set by the API from assistant_id or agent_name)"
    )
    soul: str | None = Field(
        None, description="DeerFlow's SOUL.md: personality and rules, in the lead agent's system prompt (<soul>)"
    )
    extensions: list[str] = Field(
        default_factory=list,
        description="extra middlewares as 'module:Class' (zero-argument), placed after LoopDetection, before "
        "SafetyFinishReason and Clarification",
    )

    @property
    def clarification_timeout(self) -> timedelta:
        return timedelta(seconds=self.clarification_timeout_seconds)

    def model_call_policy(self) -> ModelCallPolicy:
        """How this run calls its model: ``model_call``'s timeouts with LLMErrorHandling's retry policy and
        budget (``middlewares.llm_error_handling.llm_call``)."""
        llm = self.middlewares.llm_error_handling
        return ModelCallPolicy(
            options=ActivityOptions(
                start_to_close=timedelta(seconds=self.model_call.timeout_seconds),
                heartbeat=timedelta(seconds=self.model_call.heartbeat_seconds),
                retry=model_retry_policy(llm),
            ),
            retry_budget=retry_budget(llm),
            timeout_seconds=self.model_call.timeout_seconds,
            stream_tokens=self.model_call.stream_tokens,
        )

    def tool_call_policy(self) -> ToolCallPolicy:
        """How this run calls a tool activity (built-in or MCP)."""
        tool = self.tool_call
        return ToolCallPolicy(
            ActivityOptions(
                start_to_close=timedelta(seconds=tool.timeout_seconds),
                heartbeat=timedelta(seconds=tool.heartbeat_seconds),
                retry=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=tool.max_attempts),
            )
        )
