"""DeferredToolFilter (with ``tool_search`` enabled): deferred tools stay out of the model's tool list until it
asks for them, which keeps rarely used schemas out of every request.

The tools named in ``tool_search.deferred`` and, as in DeerFlow, every MCP tool of the run form the deferred
catalog; its hash (sha256 of the sorted name +
schema list, 16 hex digits, DeerFlow's ``DeferredToolCatalog.hash``) scopes promotions, so a changed catalog
starts over. The system message lists their names in ``<available-deferred-tools>`` (the same every call).

Tool
* ``tool_search`` (contributed to the catalog by :meth:`DeferredToolFilterMiddleware.tools`) is answered here
  from the catalog, not as an activity: ``select:a,b`` by exact names, ``+word rest`` by a required name
  fragment ranked by the rest, anything else as a case-insensitive regex (a literal when it is not one) over
  names and descriptions, names first; at most 5 results, returned as JSON function schemas. It writes
  ``promoted = {catalog_hash, names}`` (the reducer unions names under one hash).

Hooks
* ``wrap_model_call``: removes deferred tools that are not promoted under the current hash from
  ``request.tools`` and adds the ``<available-deferred-tools>`` section (**request overlay**).
* ``wrap_tool_call``: a call to a deferred tool that is not promoted (its name is in the prompt, so models do
  call it) is answered with DeerFlow's error and never executed.

Writes: request overlay; thread state (``promoted``, through ``tool_search``).

Parts: the built-in tools ``vocabulary/tools.py`` and the ``promoted`` reducer in ``vocabulary/state.py``; the MCP
tools that join the catalog, discovered by ``workflows/run/mcp_tools.py`` and added in
``workflows/run/catalog.py``; ``hartflow tools list`` (``workers/tools_list.py``). Tests:
``tests/test_deferred_tool_filter.py``, ``tests/test_mcp_units.py``, ``tests/test_mcp_tools.py``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

from langchain_core.messages import AIMessage, SystemMessage, ToolMessage
from pydantic import BaseModel, ConfigDict, Field, field_validator

from middlewares.base import Command, Middleware, ModelHandler, ModelRequest, ToolCallRequest, ToolHandler, ToolResult
from vocabulary.messages import message_text
from vocabulary.state import ThreadState
from vocabulary.tools import BUILTIN_TOOLS, ToolSpec

TOOL_SEARCH = "tool_search"
MAX_RESULTS = 5
_DEFERRABLE = {tool.name: tool for tool in BUILTIN_TOOLS if not tool.intercepted}

TOOL_SEARCH_TOOL = ToolSpec(
    TOOL_SEARCH,
    "Fetches full schema definitions for deferred tools so they can be called.\n\n"
    "Deferred tools appear by name in <available-deferred-tools> in the system\n"
    "prompt. Until fetched, only the name is known. This tool matches a query\n"
    "against the deferred tools and returns the matched tools complete schemas;\n"
    "once returned, a tool becomes callable.\n\n"
    "Query forms:\n"
    '  - "select:Read,Edit" -- fetch these exact tools by name\n'
    '  - "notebook jupyter" -- keyword search, up to max_results best matches',
    {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    intercepted=True,
)


class ToolSearchConfig(BaseModel):
    """DeerFlow's ``tool_search`` section: MCP tools are deferred (DeerFlow's behaviour), and so are the built-in
    tools named in ``deferred``."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    deferred: list[str] = Field(default_factory=list, description="built-in tools hidden until tool_search")
    auto_promote_top_k: int = Field(
        3, description="McpRouting promotes this many MCP tools matching the latest user message (clamped to 1-5)"
    )

    @field_validator("deferred")
    @classmethod
    def _deferrable(cls, names: list[str]) -> list[str]:
        unknown = sorted(set(names) - set(_DEFERRABLE))
        if unknown:
            raise ValueError(f"cannot defer {', '.join(unknown)}; deferrable tools: {', '.join(sorted(_DEFERRABLE))}")
        return names


def blocked_message(name: str) -> str:
    return (
        f"Error: Tool '{name}' is deferred and has not been promoted yet. "
        "Call tool_search first to expose and promote this tool's schema, then retry."
    )


def _function(tool: ToolSpec) -> dict[str, Any]:
    function: dict[str, Any] = tool.schema()["function"]
    return function


def _regex(pattern: str) -> re.Pattern[str]:
    """The model writes the query: an invalid regex degrades to a literal match instead of failing."""
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error:
        return re.compile(re.escape(pattern), re.IGNORECASE)


class DeferredCatalog:
    def __init__(self, tools: Iterable[ToolSpec]) -> None:
        self.tools = tuple(tools)
        self.names = frozenset(tool.name for tool in self.tools)
        canonical = [{"name": t.name, "schema": _function(t)} for t in sorted(self.tools, key=lambda t: t.name)]
        blob = json.dumps(canonical, sort_keys=True, ensure_ascii=False, default=str)
        self.hash = hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]

    def search(self, query: str) -> list[ToolSpec]:
        query = query.strip()
        if not query:
            return []
        if query.startswith("select:"):
            wanted = {name.strip() for name in query[len("select:") :].split(",")}
            return [tool for tool in self.tools if tool.name in wanted][:MAX_RESULTS]
        if query.startswith("+"):
            parts = query[1:].split(None, 1)
            if not parts:
                return []
            candidates = [tool for tool in self.tools if parts[0].lower() in tool.name.lower()]
            if len(parts) > 1:
                rest = _regex(parts[1])
                candidates.sort(key=lambda tool: len(rest.findall(f"{tool.name} {tool.description}")), reverse=True)
            return candidates[:MAX_RESULTS]
        regex = _regex(query)
        scored = [
            (2 if regex.search(tool.name) else 1, tool)
            for tool in self.tools
            if regex.search(f"{tool.name} {tool.description}")
        ]
        scored.sort(key=lambda item: item[0], reverse=True)
        return [tool for _, tool in scored][:MAX_RESULTS]

    def prompt_section(self) -> str:
        names = "\n".join(sorted(self.names))
        return f"<available-deferred-tools>\n{names}\n</available-deferred-tools>"


class DeferredToolFilterMiddleware(Middleware):
    def __init__(self, config: ToolSearchConfig, *, mcp_tools: Iterable[ToolSpec] = ()) -> None:
        builtin = [_DEFERRABLE[name] for name in dict.fromkeys(config.deferred)]
        self.catalog = DeferredCatalog([*builtin, *mcp_tools])

    def tools(self) -> list[ToolSpec]:
        return [TOOL_SEARCH_TOOL]

    def promoted(self, state: ThreadState) -> frozenset[str]:
        promoted = state.promoted or {}
        if promoted.get("catalog_hash") != self.catalog.hash:
            return frozenset()
        return frozenset(promoted.get("names") or ())

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AIMessage:
        hidden = self.catalog.names - self.promoted(request.state)
        system = request.system_message
        section = self.catalog.prompt_section()
        prompt = f"{message_text(system)}\n\n{section}" if system is not None else section
        return await handler(
            request.override(
                tools=[tool for tool in request.tools if tool.name not in hidden],
                system_message=SystemMessage(prompt),
            )
        )

    async def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolResult:
        ctx = request.ctx
        if request.name == TOOL_SEARCH:
            query = str((request.args or {}).get("query") or "")
            matched = self.catalog.search(query)
            content = (
                json.dumps([_function(tool) for tool in matched], indent=2, ensure_ascii=False)
                if matched
                else f"No tools found matching: {query}"
            )
            ctx.emit("tool_search", query=query, promoted=[tool.name for tool in matched])
            return Command(
                update={
                    "promoted": {"catalog_hash": self.catalog.hash, "names": [tool.name for tool in matched]},
                    "messages": [ToolMessage(content, tool_call_id=request.call_id, name=TOOL_SEARCH, id=ctx.uuid())],
                }
            )
        if request.name in self.catalog.names - self.promoted(request.state):
            ctx.emit("deferred_tool_blocked", tool=request.name, call_id=request.call_id)
            return ToolMessage(
                blocked_message(request.name),
                tool_call_id=request.call_id,
                name=request.name,
                status="error",
                id=ctx.uuid(),
            )
        return await handler(request)
