"""Summarization's config (``summarization:`` in a run's settings; the middleware: ``middlewares/summarization.py``)
and the token counter its token sizes are measured with. Defined apart from the middleware so the compaction plan
(``middlewares/_compaction.py``), the skill-read rescue (``middlewares/_skill_reads.py``) and the summary prompt
(``middlewares/_summary_prompt.py``) read them without importing the middleware that uses them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from langchain_core.messages import BaseMessage
from langchain_core.messages.utils import count_tokens_approximately
from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_MESSAGES_TO_KEEP = 20


class ContextSize(BaseModel):
    """A trigger or retention size: a message count, a token count, or a fraction of the context window."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["messages", "tokens", "fraction"]
    value: float = Field(gt=0)

    @model_validator(mode="after")
    def _in_range(self) -> ContextSize:
        if self.type == "fraction" and self.value > 1:
            raise ValueError("a fraction must be in (0, 1]")
        if self.type != "fraction" and self.value != int(self.value):
            raise ValueError(f"{self.type} must be a whole number")
        return self


class SummarizationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    model: str | None = Field(default=None, description="model spec for summaries; unset = the run's model")
    trigger: ContextSize | list[ContextSize] | None = Field(
        default=None, description="when to summarise (a list: any of them); unset = never"
    )
    keep: ContextSize = Field(default_factory=lambda: ContextSize(type="messages", value=DEFAULT_MESSAGES_TO_KEEP))
    trim_tokens_to_summarize: int | None = Field(default=4000, ge=1, description="summary input budget; null = all")
    summary_prompt: str | None = Field(default=None, description="template with {messages}; unset = langchain's")
    preserve_recent_skill_count: int = Field(default=5, ge=0, description="recent skill reads kept verbatim; 0 = off")
    preserve_recent_skill_tokens: int = Field(default=25_000, ge=0)
    preserve_recent_skill_tokens_per_skill: int = Field(default=5_000, ge=0)
    skill_file_read_tool_names: list[str] = Field(default_factory=lambda: ["read_file", "read", "view", "cat"])
    skills_container_path: str = Field(default="/mnt/skills", description="DeerFlow's skills.container_path")

    @property
    def triggers(self) -> list[ContextSize]:
        if self.trigger is None:
            return []
        return list(self.trigger) if isinstance(self.trigger, list) else [self.trigger]


def count_tokens(messages: Sequence[BaseMessage]) -> int:
    """langchain's default counter for summarisation: approximate, scaled by the last reported usage."""
    return count_tokens_approximately(messages, use_usage_metadata_scaling=True)
