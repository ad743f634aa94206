"""What the caller's settings make of a run: the custom agent it names and the user's MCP servers.

A run names a custom agent by ``assistant_id`` (LangGraph's way) or, with the built-in assistant, by
``agent_name`` in ``context`` or ``config.configurable`` (DeerFlow's app: ``frontend/src/core/threads/hooks.ts``).
The agent gives the run its ``tool_groups`` (only the ``tools:`` entries of those groups), its model (unless the
request names a configured one, as DeerFlow's lead agent resolves ``model_name or agent.model``), its SOUL
(rendered in the system prompt, ``workflows/run/prompt.py``) and its skills
(``skill_activation.available_skills``). The user's MCP servers (``activities/mcp/overlay.py``) are read here, at
the start, so the run's input names them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import HTTPException

from activities.agents_store import Agent, AgentNameError, AgentsStore
from activities.configured_tools.entries import in_groups
from activities.mcp.overlay import enabled_names, load_overlay
from middlewares.run_settings import RunSettings
from workers.api.deps import ApiContext
from workers.api.discovery import ASSISTANT_ALIASES
from workers.config import HartflowConfig


async def find_agent(context: ApiContext, user: str, name: str) -> Agent | None:
    """The caller's agent of that name, ``None`` when there is none (or the name cannot be one)."""
    try:
        return await asyncio.to_thread(AgentsStore(context.objects).get, user, name)
    except AgentNameError:
        return None


async def run_agent(context: ApiContext, user: str, assistant_id: str, agent_name: Any) -> Agent | None:
    """The custom agent a run request names; ``None`` for the built-in assistant; an unknown one is 404."""
    name = assistant_id if assistant_id not in ASSISTANT_ALIASES else agent_name
    if not isinstance(name, str) or not name or name in ASSISTANT_ALIASES:
        return None
    agent = await find_agent(context, user, name)
    if agent is None:
        builtin = ", ".join(repr(alias) for alias in sorted(ASSISTANT_ALIASES))
        raise HTTPException(404, f"assistant {name[:100]!r} not found (the built-in ones are {builtin})")
    return agent


def requested_model(config: HartflowConfig, requested: Any, agent: Agent | None) -> Any:
    """The model a run asks for: the request's when it names a configured model (or a raw spec), else the
    agent's."""
    if agent is None or not agent.model:
        return requested
    if isinstance(requested, str) and (":" in requested or any(entry.name == requested for entry in config.models)):
        return requested
    return agent.model


async def personal_settings(context: ApiContext, user: str, settings: RunSettings, agent: Agent | None) -> RunSettings:
    """``settings`` with the user's MCP servers and the agent's SOUL and skills."""
    update: dict[str, Any] = {"mcp_servers": await user_mcp_servers(context, user)}
    if agent is None:
        return settings.model_copy(update=update)
    update |= {"agent_name": agent.name, "soul": agent.soul or None}
    if agent.tool_groups is not None and context.config.tools:
        # DeerFlow's get_available_tools(groups=agent.tool_groups): only the configured tools of those groups.
        update["tools"] = in_groups(context.config.tools, list(agent.tool_groups))
    if agent.skills is not None:
        middlewares = settings.middlewares
        activation = middlewares.skill_activation.model_copy(update={"available_skills": list(agent.skills)})
        update["middlewares"] = middlewares.model_copy(update={"skill_activation": activation})
    return settings.model_copy(update=update)


async def user_mcp_servers(context: ApiContext, user: str) -> list[str]:
    """The MCP servers the user's next run gets: the deployment's they kept on, and their own."""
    overlay = await asyncio.to_thread(load_overlay, context.objects, user)
    return enabled_names(context.config.mcp.effective(), overlay)
