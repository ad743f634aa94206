"""McpRouting (with ``tool_search`` enabled and MCP tools in the run): promotes the deferred MCP tools that the
latest real user message asks for, so the model sees their schemas without a ``tool_search`` round trip
(DeerFlow's ``McpRoutingMiddleware``). It sits right before DeferredToolFilter, which hides what is not
promoted and blocks calls to it.

Hook
* ``before_model``: matches the latest real user message (DeerFlow's ``is_real_user_message``: typed, not
  hidden, not a summary; its ``original_user_content`` when a middleware framed it) against the MCP tools'
  names and descriptions (``middlewares/_mcp_routing.py``) and promotes the best ``tool_search
  .auto_promote_top_k`` (default 3, clamped to 1-5). Writes **thread state**: ``promoted = {catalog_hash,
  names}`` under DeferredToolFilter's catalog hash (the reducer unions names under one hash); nothing when no
  tool matches or all matches are promoted already.

Parts: the matcher ``middlewares/_mcp_routing.py`` and ``middlewares/_messages.py``; the MCP tools it routes over,
discovered once per run by ``workflows/run/mcp_tools.py`` (``vocabulary/contracts/mcp.py`` ``MCP_LIST_TOOLS``,
``activities/mcp/activities.py``); the ``promoted`` reducer in ``vocabulary/state.py``. Tests:
``tests/test_mcp_units.py``, ``tests/test_mcp_tools.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

from middlewares._mcp_routing import best_matches, build_index, clamp_top_k
from middlewares._messages import is_real_user_message, original_user_text
from middlewares.base import Middleware
from middlewares.context import RunContext
from vocabulary.state import StateUpdate, ThreadState
from vocabulary.tools import ToolSpec


class McpRoutingMiddleware(Middleware):
    def __init__(self, tools: Sequence[ToolSpec], catalog_hash: str, top_k: int) -> None:
        self._index = build_index((tool.name, tool.description) for tool in tools)
        self._catalog_hash = catalog_hash
        self._top_k = clamp_top_k(top_k)

    async def before_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        message = next((m for m in reversed(state.messages) if is_real_user_message(m)), None)
        if message is None:
            return None
        names = best_matches(self._index, original_user_text(message), self._top_k)
        promoted = state.promoted or {}
        already = set(promoted.get("names") or ()) if promoted.get("catalog_hash") == self._catalog_hash else set()
        if not names or set(names) <= already:
            return None
        ctx.emit("mcp_routing", promoted=names)
        return {"promoted": {"catalog_hash": self._catalog_hash, "names": names}}
