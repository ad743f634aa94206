"""Health, server info and the one assistant: ``hartflow`` (DeerFlow's frontend asks for ``lead_agent``)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import ConfigDict

from workers.api.deps import User
from workers.api.limits import ApiBody

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


def assistant_graph(assistant_id: str) -> str:
    """The graph an assistant runs: each of this server's assistants is its own graph (``assistant`` says so)."""
    return str(assistant(assistant_id)["graph_id"])


def known_assistant(assistant_id: str) -> str:
    """``assistant_id`` if the server has it, else 404."""
    if assistant_id not in ASSISTANT_ALIASES:
        raise HTTPException(404, f"assistant {assistant_id!r} not found (this server has 'hartflow', 'lead_agent')")
    return assistant_id


@router.get("/ok")
async def ok() -> dict[str, bool]:
    return {"ok": True}


@router.get("/info")
async def info(_: User) -> dict[str, Any]:
    return {"version": server_version(), "flags": {"assistants": True, "crons": False, "langsmith": False}}


class AssistantSearch(ApiBody):
    model_config = ConfigDict(extra="allow")
    graph_id: str | None = None
    limit: int = 10
    offset: int = 0


@router.post("/assistants/search")
async def search_assistants(body: AssistantSearch, _: User) -> list[dict[str, Any]]:
    found = [assistant(name) for name in sorted(ASSISTANT_ALIASES) if body.graph_id in (None, name)]
    return found[body.offset : body.offset + body.limit]


@router.get("/assistants/{assistant_id}")
async def get_assistant(assistant_id: str, _: User) -> dict[str, Any]:
    return assistant(known_assistant(assistant_id))
