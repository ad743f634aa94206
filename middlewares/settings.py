"""Per-middleware configuration, one field per middleware that has settings (the ``middlewares:`` key of
``hartflow.yaml``). Each middleware module defines its own config model; this class only gathers them so
that an unknown key or a bad value is an error that names it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from middlewares.deferred_tool_filter import ToolSearchConfig
from middlewares.dynamic_context import DynamicContextConfig
from middlewares.guardrail import GuardrailsConfig
from middlewares.llm_error_handling import LLMErrorHandlingConfig
from middlewares.loop_detection import LoopDetectionConfig
from middlewares.memory import MemoryConfig
from middlewares.read_before_write import ReadBeforeWriteConfig
from middlewares.safety_finish_reason import SafetyFinishReasonConfig
from middlewares.sandbox import SandboxConfig
from middlewares.skill_activation import SkillActivationConfig
from middlewares.summarization import SummarizationConfig
from middlewares.thread_data import ThreadDataConfig
from middlewares.title import TitleConfig
from middlewares.token_budget import TokenBudgetConfig
from middlewares.token_usage import TokenUsageConfig
from middlewares.tool_approval import ToolApprovalConfig
from middlewares.tool_output_budget import ToolOutputConfig
from middlewares.tool_progress import ToolProgressConfig
from middlewares.uploads import UploadsConfig


class MiddlewareSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool_output: ToolOutputConfig = Field(default_factory=ToolOutputConfig)
    thread_data: ThreadDataConfig = Field(default_factory=ThreadDataConfig)
    uploads: UploadsConfig = Field(default_factory=UploadsConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    guardrails: GuardrailsConfig = Field(default_factory=GuardrailsConfig)
    llm_error_handling: LLMErrorHandlingConfig = Field(default_factory=LLMErrorHandlingConfig)
    summarization: SummarizationConfig = Field(default_factory=SummarizationConfig)
    title: TitleConfig = Field(default_factory=TitleConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    dynamic_context: DynamicContextConfig = Field(default_factory=DynamicContextConfig)
    skill_activation: SkillActivationConfig = Field(default_factory=SkillActivationConfig)
    token_usage: TokenUsageConfig = Field(default_factory=TokenUsageConfig)
    tool_search: ToolSearchConfig = Field(default_factory=ToolSearchConfig)
    loop_detection: LoopDetectionConfig = Field(default_factory=LoopDetectionConfig)
    safety_finish_reason: SafetyFinishReasonConfig = Field(default_factory=SafetyFinishReasonConfig)
    read_before_write: ReadBeforeWriteConfig = Field(default_factory=ReadBeforeWriteConfig)
    tool_progress: ToolProgressConfig = Field(default_factory=ToolProgressConfig)
    tool_approval: ToolApprovalConfig = Field(default_factory=ToolApprovalConfig)
    token_budget: TokenBudgetConfig = Field(default_factory=TokenBudgetConfig)
    subagent_token_budget: TokenBudgetConfig | None = Field(
        default=None, description="DeerFlow's subagents.token_budget; unset: on, 1M tokens (2M without summarization)"
    )
