"""Configured tools (``tools:`` in the config): what the worker built from each entry, and one call of one.

A run asks the worker once for the tools its settings name (``tools.describe``, recorded in history like MCP
discovery) and calls each through ``tools.call`` on its own task queue, or through the team's own activity for an
``activity_as_tool`` entry (``ToolExecution.task_queue``). Settings such as ``$VAR`` keys stay on the worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vocabulary.activity_ref import ActivityRef
from vocabulary.contracts.thread import ThreadRef
from vocabulary.tools import ToolExecution, ToolSpec


@dataclass
class ConfiguredToolInfo:
    name: str
    description: str
    parameters: dict[str, Any]
    source: str
    """Where the tool comes from, as ``hartflow tools list`` shows it (``web:ddg``, ``langchain:pkg.mod:attr``,
    ``function:pkg.mod:fn``, ``activity:NAME@QUEUE``)."""
    execution: ToolExecution

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters, execution=self.execution)


@dataclass
class ToolsDescribeInput:
    names: list[str]


@dataclass
class ToolsDescribeResult:
    tools: list[ConfiguredToolInfo]
    missing: list[str] = field(default_factory=list)
    """Names this worker has no entry for (its config changed since the run started)."""


@dataclass
class ConfiguredToolCallInput:
    thread: ThreadRef
    name: str
    args: dict[str, Any]
    call_id: str = ""


@dataclass
class ConfiguredToolCallOutput:
    content: str
    status: str = "success"
    artifact: Any = None


TOOLS_DESCRIBE = ActivityRef("tools.describe", ToolsDescribeInput, ToolsDescribeResult)
TOOLS_CALL = ActivityRef("tools.call", ConfiguredToolCallInput, ConfiguredToolCallOutput)
