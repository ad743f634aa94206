"""MCP servers' tools: list them, and call one (``activities/mcp/``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vocabulary.activity_ref import ActivityRef
from vocabulary.contracts.thread import ThreadRef


@dataclass
class McpListToolsInput:
    servers: list[str]
    """Names of the servers to ask, as the worker's config spells them (or the user's own, below)."""
    user_id: str | None = None
    """Whose run asks: a name the config does not have is one of this user's own servers
    (``activities/mcp/overlay.py``)."""


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


MCP_LIST_TOOLS = ActivityRef("mcp.list_tools", McpListToolsInput, McpListToolsResult)
MCP_CALL_TOOL = ActivityRef("mcp.call_tool", McpCallInput, McpCallOutput)
