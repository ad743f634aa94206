"""``GET /api/features``: which of DeerFlow's optional features this server has, so the app gates its pages.

The shape is DeerFlow's (``bytedance/deer-flow: backend/app/gateway/routers/features.py``, ``FeaturesResponse``;
read by ``frontend/src/core/features/api.ts`` and ``frontend/src/core/agents/hooks.ts``):
``{agents_api: {enabled}, browser_control: {enabled}, mcp_tasks: {enabled}}``. ``agents_api`` is on exactly when
this app serves DeerFlow's agents routes (``/api/agents``), read from the routes themselves so the answer cannot
drift from what is served. hartflow has no live browser control and no durable MCP task API: both off.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.routing import iter_route_contexts

router = APIRouter()

AGENTS_ROUTE = "/api/agents"


@router.get("/features")
async def list_features(request: Request) -> dict[str, Any]:
    served = {route.path for route in iter_route_contexts(request.app.routes)}
    return {
        "agents_api": {"enabled": AGENTS_ROUTE in served},
        "browser_control": {"enabled": False},
        "mcp_tasks": {"enabled": False},
    }
