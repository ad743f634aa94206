"""``/api/mcp/config``: the MCP servers of the caller's runs, as DeerFlow's Settings → Tools page reads and edits them.

``GET`` → ``{mcp_servers: {name: server}}`` (``frontend/src/core/mcp/api.ts``): the deployment's servers from
``hartflow.yaml`` and the caller's own, every ``env`` and ``headers`` value shown as ``***``. ``PUT`` replaces the
caller's list (DeerFlow's ``McpConfigUpdateRequest``), ``PATCH {server_name, enabled}`` is the page's switch. What
may change and how it is checked (per user; a deployment server only on or off) is ``activities/mcp/overlay.py``;
a refused update writes nothing. The caller's next run gets the result (``workers/api/run_agent.py``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import Field

from activities.mcp.overlay import McpOverlay, McpUpdateError, load_overlay, replaced, save_overlay, toggled, view
from workers.api.deps import ApiContext, Context, User
from workers.api.limits import ApiBody

router = APIRouter()


class McpConfigUpdate(ApiBody):
    mcp_servers: dict[str, Any] = Field(default_factory=dict)


class McpServerToggle(ApiBody):
    server_name: str = Field(min_length=1, max_length=100)
    enabled: bool


async def _overlay(context: ApiContext, user: str) -> McpOverlay:
    return await asyncio.to_thread(load_overlay, context.objects, user)


async def _save(context: ApiContext, user: str, overlay: McpOverlay) -> dict[str, Any]:
    await asyncio.to_thread(save_overlay, context.objects, user, overlay)
    return view(context.config.mcp.effective(), overlay)


@router.get("/mcp/config")
async def get_mcp_config(context: Context, user: User) -> dict[str, Any]:
    return view(context.config.mcp.effective(), await _overlay(context, user))


@router.put("/mcp/config")
async def put_mcp_config(body: McpConfigUpdate, context: Context, user: User) -> dict[str, Any]:
    mcp = context.config.mcp
    try:
        overlay = replaced(mcp.effective(), await _overlay(context, user), body.mcp_servers, mcp.api_stdio_commands)
    except McpUpdateError as exc:
        raise HTTPException(exc.status, str(exc)) from None
    return await _save(context, user, overlay)


@router.patch("/mcp/config")
async def patch_mcp_config(body: McpServerToggle, context: Context, user: User) -> dict[str, Any]:
    try:
        overlay = toggled(context.config.mcp.effective(), await _overlay(context, user), body.server_name, body.enabled)
    except McpUpdateError as exc:
        raise HTTPException(exc.status, str(exc)) from None
    return await _save(context, user, overlay)
