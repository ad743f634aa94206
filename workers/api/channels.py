"""DeerFlow's IM channels and its Lark/Feishu integration: not served by hartflow. Every route the app reads on
page load answers "none configured" in the app's shape; every route that would configure one is a 400 whose
``detail`` the app shows as its error toast (DeerFlow's own answer while channel connections are disabled).

* ``GET /api/channels/providers`` → ``{enabled: false, providers: []}``: the sidebar's Channels section hides
  itself (``bytedance/deer-flow: frontend/src/components/workspace/channels/workspace-channels-list.tsx``);
  ``GET /api/channels/connections`` → ``{connections: []}`` (``frontend/src/core/channels/api.ts``, shapes in
  ``frontend/src/core/channels/types.ts``, DeerFlow's ``backend/app/gateway/routers/channel_connections.py``).
* ``POST /api/channels/{provider}/connect``, ``POST|DELETE /api/channels/{provider}/runtime-config``,
  ``DELETE /api/channels/connections/{id}`` → 400.
* ``GET /api/integrations/lark/status`` → the status of an integration that is not installed, its CLI
  unavailable and its auth ``unavailable``, each saying why (``frontend/src/core/integrations/lark/types.ts``,
  ``LarkIntegrationStatus``; read by ``frontend/src/components/workspace/settings/integrations-settings-page.tsx``);
  the lark writes (install, config and auth steps) → 400.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException

router = APIRouter()

CHANNELS_NOT_SERVED = "IM channels are not served by hartflow (see the README, DeerFlow's web app)"
LARK_NOT_SERVED = "the Lark/Feishu integration is not served by hartflow (see the README, DeerFlow's web app)"
LARK_WRITES = ("install", "config/start", "config/complete", "config/credentials", "auth/start", "auth/complete")
"""DeerFlow's lark routes that install or configure (``frontend/src/core/integrations/lark/api.ts``)."""


@router.get("/channels/providers")
async def channel_providers() -> dict[str, Any]:
    return {"enabled": False, "providers": []}


@router.get("/channels/connections")
async def channel_connections() -> dict[str, Any]:
    return {"connections": []}


@router.post("/channels/{provider}/connect")
@router.post("/channels/{provider}/runtime-config")
@router.delete("/channels/{provider}/runtime-config")
async def configure_channel(provider: str) -> None:
    raise HTTPException(400, CHANNELS_NOT_SERVED)


@router.delete("/channels/connections/{connection_id}")
async def disconnect_channel(connection_id: str) -> None:
    raise HTTPException(400, CHANNELS_NOT_SERVED)


@router.get("/integrations/lark/status")
async def lark_status() -> dict[str, Any]:
    return {
        "installed": False,
        "version": "",
        "manifest_version": None,
        "latest_available_version": None,
        "runtime_version_mismatch": False,
        "app_configured": False,
        "app_id": None,
        "app_brand": None,
        "skills_expected": 0,
        "skills_installed": 0,
        "installed_skills": [],
        "enabled_skills": [],
        "install_path": "",
        "cli": {"available": False, "path": None, "version": None, "error": LARK_NOT_SERVED},
        "auth": {"status": "unavailable", "message": LARK_NOT_SERVED, "user": None, "verified": False},
        "sandbox_runtime_mode": "none",
        "sandbox_runtime_ready": False,
        "sandbox_runtime_detail": None,
    }


async def lark_not_served() -> None:
    raise HTTPException(400, LARK_NOT_SERVED)


for _action in LARK_WRITES:
    router.add_api_route(f"/integrations/lark/{_action}", lark_not_served, methods=["POST"])
