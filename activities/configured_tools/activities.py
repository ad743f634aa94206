"""The configured tools on the worker: every ``tools:`` entry built once when the worker starts (a bad entry stops
the worker with the key named), described to a run (``tools.describe``) and called (``tools.call``).

A call heartbeats while the tool runs, so a lost worker is noticed within the tool's heartbeat timeout and
another worker retries it. Arguments the tool rejects (a LangChain ``ToolException``, a validation error) fail the
same way on every attempt: non-retryable, and ToolErrorHandling answers the model with the error.
"""

from __future__ import annotations

from collections.abc import Mapping

from langchain_core.tools import ToolException
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

from activities.configured_tools.build import BuiltTool, build_tool, sandbox_tool_of
from activities.configured_tools.entries import ToolEntry
from activities.contract import implements
from activities.heartbeat import heartbeating
from vocabulary.contracts.configured_tools import (
    TOOLS_CALL,
    TOOLS_DESCRIBE,
    ConfiguredToolCallInput,
    ConfiguredToolCallOutput,
    ToolsDescribeInput,
    ToolsDescribeResult,
)

HEARTBEAT_INTERVAL_SECONDS = 5.0


def build_tools(entries: list[ToolEntry], environ: Mapping[str, str]) -> dict[str, BuiltTool]:
    """Every entry that is not a built-in sandbox tool, built (``ToolBuildError`` naming the key)."""
    return {
        entry.name: build_tool(index, entry, environ)
        for index, entry in enumerate(entries)
        if sandbox_tool_of(entry.use) is None
    }


class ConfiguredToolActivities:
    def __init__(self, tools: dict[str, BuiltTool], *, heartbeat_interval: float = HEARTBEAT_INTERVAL_SECONDS) -> None:
        self._tools = tools
        self._heartbeat_interval = heartbeat_interval

    @implements(TOOLS_DESCRIBE)
    async def describe(self, input: ToolsDescribeInput) -> ToolsDescribeResult:
        found = [self._tools[name].info for name in input.names if name in self._tools]
        return ToolsDescribeResult(found, [name for name in input.names if name not in self._tools])

    @implements(TOOLS_CALL)
    async def call(self, input: ConfiguredToolCallInput) -> ConfiguredToolCallOutput:
        tool = self._tools.get(input.name)
        if tool is None or tool.run is None:
            raise ApplicationError(
                f"tool {input.name!r} is not configured on this worker", type="UnknownTool", non_retryable=True
            )
        try:
            content = await heartbeating(tool.run(dict(input.args)), self._heartbeat_interval)
        except (ToolException, ValidationError) as exc:
            raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from None
        return ConfiguredToolCallOutput(content)
