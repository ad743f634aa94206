"""LangGraph's ``/assistants``: the built-in assistant and the caller's custom agents (``agents_route.py``).

An agent is an assistant whose ``assistant_id`` and ``name`` are the agent's name and whose ``context`` holds the
agent's fields (``model``, ``tool_groups``, ``skills``, ``soul``, ...), as ``langgraph-sdk``'s ``assistants``
client creates, updates, searches and deletes them; ``POST /api/agents`` makes the same thing. The built-in
assistant (``hartflow``, alias ``lead_agent``) cannot be changed or deleted (409).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Literal

from fastapi import APIRouter, HTTPException, Response
from pydantic import ConfigDict, Field, ValidationError

from activities.agents_store import Agent, AgentFields
from workers.api import agents_route
from workers.api.deps import ApiContext, Context, User
from workers.api.discovery import ASSISTANT_ALIASES, assistant
from workers.api.limits import ApiBody
from workers.api.run_agent import find_agent

router = APIRouter()


class AssistantSearch(ApiBody):
    model_config = ConfigDict(extra="allow")
    graph_id: str | None = None
    name: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    limit: int = Field(10, ge=0, le=1000)
    offset: int = Field(0, ge=0)


class AssistantCreate(ApiBody):
    graph_id: str | None = None
    assistant_id: str | None = None
    name: str | None = None
    description: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    context: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    if_exists: Literal["raise", "do_nothing"] = "raise"


class AssistantPatch(ApiBody):
    graph_id: str | None = None
    name: str | None = None
    description: str | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


def agent_assistant(agent: Agent) -> dict[str, Any]:
    context = agent.model_dump(mode="json", include=set(AgentFields.model_fields) - {"description"})
    return {
        "assistant_id": agent.name,
        "graph_id": agent.graph_id,
        "name": agent.name,
        "description": agent.description,
        "config": {},
        "context": context,
        "metadata": agent.metadata,
        "version": agent.version,
        "created_at": agent.created_at,
        "updated_at": agent.updated_at,
    }


def _graph(graph_id: str | None) -> str:
    if graph_id is None:
        return "lead_agent"
    if graph_id not in ASSISTANT_ALIASES:
        raise HTTPException(
            422, f"graph_id {graph_id[:100]!r} is not served (this server has 'hartflow', 'lead_agent')"
        )
    return graph_id


def _fields(context: dict[str, Any], description: str | None) -> AgentFields:
    try:
        return AgentFields.model_validate({**context, **({"description": description} if description else {})})
    except ValidationError as exc:
        problem = exc.errors()[0]
        raise HTTPException(422, f"context.{'.'.join(map(str, problem['loc']))}: {problem['msg']}") from None


def _builtin(assistant_id: str) -> None:
    if assistant_id in ASSISTANT_ALIASES:
        raise HTTPException(409, f"assistant {assistant_id!r} is built in: it cannot be changed or deleted")


async def _all(context: ApiContext, user: str) -> list[dict[str, Any]]:
    agents = await asyncio.to_thread(agents_route.agents(context).list, user)
    return [assistant(name) for name in sorted(ASSISTANT_ALIASES)] + [agent_assistant(a) for a in agents]


@router.post("/assistants/search")
async def search_assistants(body: AssistantSearch, context: Context, user: User) -> list[dict[str, Any]]:
    found = [
        item
        for item in await _all(context, user)
        if body.graph_id in (None, item["graph_id"])
        and (body.name is None or body.name.lower() in item["name"].lower())
        and all(item["metadata"].get(key) == value for key, value in body.metadata.items())
    ]
    return found[body.offset : body.offset + body.limit]


@router.get("/assistants/{assistant_id}")
async def get_assistant(assistant_id: str, context: Context, user: User) -> dict[str, Any]:
    if assistant_id in ASSISTANT_ALIASES:
        return assistant(assistant_id)
    agent = await find_agent(context, user, assistant_id)
    if agent is None:
        raise HTTPException(404, f"assistant {assistant_id[:100]!r} not found")
    return agent_assistant(agent)


@router.post("/assistants")
async def create_assistant(body: AssistantCreate, context: Context, user: User) -> dict[str, Any]:
    name = body.assistant_id or body.name or str(uuid.uuid4())
    graph_id = _graph(body.graph_id)
    fields = _fields(body.context, body.description)
    stored = agents_route.stored_name(name)
    if body.if_exists == "do_nothing" and (found := await find_agent(context, user, stored)) is not None:
        return agent_assistant(found)
    _builtin(stored)
    agent = await agents_route.create(context, user, stored, fields, graph_id=graph_id, metadata=body.metadata)
    return agent_assistant(agent)


@router.patch("/assistants/{assistant_id}")
async def update_assistant(assistant_id: str, body: AssistantPatch, context: Context, user: User) -> dict[str, Any]:
    _builtin(assistant_id)
    current = await agents_route.require_agent(context, user, assistant_id)
    if body.name is not None and body.name.lower() != current.name:
        raise HTTPException(422, "an agent's name is its assistant_id: it cannot be renamed")
    changes: dict[str, Any] = dict(body.context or {})
    unknown = sorted(set(changes) - set(AgentFields.model_fields))
    if unknown:
        raise HTTPException(422, f"context.{unknown[0]}: not an agent field")
    if body.description is not None:
        changes["description"] = body.description
    if body.graph_id is not None:
        changes["graph_id"] = _graph(body.graph_id)
    if body.metadata is not None:
        changes["metadata"] = {**current.metadata, **body.metadata}
    return agent_assistant(await agents_route.update(context, user, current.name, changes))


@router.delete("/assistants/{assistant_id}", status_code=204)
async def delete_assistant(assistant_id: str, context: Context, user: User) -> Response:
    _builtin(assistant_id)
    await agents_route.delete(context, user, assistant_id)
    return Response(status_code=204)
