"""Health, server info and the built-in assistant: ``hartflow`` (DeerFlow's frontend asks for ``lead_agent``); the
assistants routes, with the users' custom agents, are ``workers/api/assistants_route.py``."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import APIRouter

from workers.api.deps import User

ASSISTANT_ID = "hartflow"
ASSISTANT_ALIASES = frozenset({ASSISTANT_ID, "lead_agent"})
_CREATED = "2026-01-01T00:00:00+00:00"

router = APIRouter()


def server_version() -> str:
    try:
        return version("hartflow")
    except PackageNotFoundError:
        return "0"


def assistant(assistant_id: str = ASSISTANT_ID) -> dict[str, Any]:
    return {
        "assistant_id": assistant_id,
        "graph_id": assistant_id,
        "name": assistant_id,
        "description": "DeerFlow's lead agent as a durable hartflow run",
        "config": {},
        "context": {},
        "metadata": {},
        "version": 1,
        "created_at": _CREATED,
        "updated_at": _CREATED,
    }


@router.get("/ok")
async def ok() -> dict[str, bool]:
    return {"ok": True}


@router.get("/info")
async def info(_: User) -> dict[str, Any]:
    return {"version": server_version(), "flags": {"assistants": True, "crons": True, "langsmith": False}}
