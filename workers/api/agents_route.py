"""``/api/agents``: DeerFlow's custom agents, per user (``activities/agents_store.py``).

The routes and shapes of ``bytedance/deer-flow: backend/app/gateway/routers/agents.py`` as the app calls them
(``frontend/src/core/agents/api.ts``): ``GET /agents`` → ``{agents: [agent]}``, ``GET /agents/check?name=`` →
``{available, name}``, ``GET/PUT/DELETE /agents/{name}``, ``POST /agents`` → 201. A name that breaks the rule is
422, a taken one 409, another user's agent 404 as an unknown one. Every field is checked before anything is
written; a ``model`` must be one ``GET /api/models`` lists.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from fastapi import APIRouter, HTTPException, Response
from pydantic import ConfigDict, Field, ValidationError

from activities.agents_store import (
    MAX_SOUL_CHARS,
    Agent,
    AgentExistsError,
    AgentFields,
    AgentModelSettings,
    AgentNameError,
    AgentsStore,
    agent_name,
)
from workers.api.deps import ApiContext, Context, User
from workers.api.limits import ApiBody
from workers.api.models_route import configured_models
from workers.config import HartflowConfig
from workers.models import api_models

router = APIRouter()


class AgentCreate(ApiBody, AgentFields):
    model_config = ConfigDict(extra="ignore")
    name: str


class AgentUpdate(ApiBody):
    """Every field optional: an omitted one keeps its value; ``null`` clears one (``skills: null``: all)."""

    description: str | None = Field(None, max_length=2_000)
    model: str | None = Field(None, max_length=200)
    tool_groups: list[str] | None = Field(None, max_length=100)
    skills: list[str] | None = Field(None, max_length=500)
    model_settings: AgentModelSettings | None = None
    thinking_enabled: bool | None = None
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    soul: str | None = Field(None, max_length=MAX_SOUL_CHARS)

    def changes(self) -> dict[str, Any]:
        """The fields the caller set; ``description`` and ``soul`` sent as ``null`` change nothing (DeerFlow)."""
        return {
            name: getattr(self, name)
            for name in self.model_fields_set
            if not (name in ("description", "soul") and getattr(self, name) is None)
        }


def stored_name(name: str) -> str:
    try:
        return agent_name(name)
    except AgentNameError as exc:
        raise HTTPException(422, str(exc)) from None


def model_names(config: HartflowConfig) -> list[str]:
    """The names ``GET /api/models`` lists: what an agent's ``model`` may be."""
    listed = api_models(config)["models"] if config.models else configured_models(config)
    return [str(entry["name"]) for entry in listed]


def check_model(config: HartflowConfig, model: str | None) -> None:
    """A model ``GET /api/models`` lists (DeerFlow refuses an unknown one: it would silently fall back)."""
    if not model:
        return
    names = model_names(config)
    if model not in names:
        raise HTTPException(422, f"Unknown model {model[:100]!r}. Use a name GET /api/models lists: {names}")


def agents(context: ApiContext) -> AgentsStore:
    return AgentsStore(context.objects)


async def require_agent(context: ApiContext, user: str, name: str) -> Agent:
    found = await asyncio.to_thread(agents(context).get, user, stored_name(name))
    if found is None:
        raise HTTPException(404, f"Agent {name.lower()!r} not found")
    return found


async def create(context: ApiContext, user: str, name: str, fields: AgentFields, **extra: Any) -> Agent:
    check_model(context.config, fields.model)
    stored = stored_name(name)
    try:
        return await asyncio.to_thread(agents(context).create, user, stored, fields, **extra)
    except AgentExistsError:
        raise HTTPException(409, f"Agent {stored!r} already exists") from None


async def update(context: ApiContext, user: str, name: str, changes: dict[str, Any]) -> Agent:
    if changes.get("model") is not None:
        check_model(context.config, changes["model"])
    current = await require_agent(context, user, name)
    try:
        own = {key: value for key, value in changes.items() if key in AgentFields.model_fields}
        AgentFields.model_validate({**current.model_dump(include=set(AgentFields.model_fields)), **own})
    except ValidationError as exc:
        raise HTTPException(422, str(exc.errors()[0]["msg"])) from None
    updated = await asyncio.to_thread(agents(context).update, user, current.name, changes)
    if updated is None:
        raise HTTPException(404, f"Agent {current.name!r} not found")  # deleted meanwhile
    return updated


async def delete(context: ApiContext, user: str, name: str) -> None:
    if not await asyncio.to_thread(agents(context).delete, user, stored_name(name)):
        raise HTTPException(404, f"Agent {name.lower()!r} not found")


@router.get("/agents")
async def list_agents(context: Context, user: User) -> dict[str, Any]:
    found = await asyncio.to_thread(agents(context).list, user)
    return {"agents": [agent.api_view() for agent in found]}


@router.get("/agents/check")
async def check_agent_name(context: Context, user: User, name: str) -> dict[str, Any]:
    stored = stored_name(name)
    taken = await asyncio.to_thread(agents(context).exists, user, stored)
    return {"available": not taken, "name": stored}


@router.get("/agents/{name}")
async def get_agent(name: str, context: Context, user: User) -> dict[str, Any]:
    return (await require_agent(context, user, name)).api_view()


@router.post("/agents", status_code=201)
async def create_agent(body: AgentCreate, context: Context, user: User) -> dict[str, Any]:
    fields = AgentFields.model_validate(body.model_dump(include=set(AgentFields.model_fields)))
    return (await create(context, user, body.name, fields)).api_view()


@router.put("/agents/{name}")
async def update_agent(name: str, body: AgentUpdate, context: Context, user: User) -> dict[str, Any]:
    return (await update(context, user, name, body.changes())).api_view()


@router.delete("/agents/{name}", status_code=204)
async def delete_agent(name: str, context: Context, user: User) -> Response:
    await delete(context, user, name)
    return Response(status_code=204)
