"""Custom agents (DeerFlow's ``agents``): a name, a description, a model, tool groups, skills and a SOUL, per user.

Layout: one document per agent, ``users/{user_id}/agents/{name}.json`` of the object store. A name follows
DeerFlow's rule (``^[A-Za-z0-9-]+$``, stored lowercase, ``bytedance/deer-flow:
backend/app/gateway/routers/agents.py``); the names of the built-in assistant are taken. A run names an agent
by ``assistant_id`` or ``agent_name`` (``workers/api/run_agent.py``): it gets the agent's model, its SOUL in the
system prompt (``workflows/run/prompt.py``) and only its skills.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from activities.paths import validate_user_id
from activities.storage import ObjectExistsError, ObjectStore

AGENT_NAME = re.compile(r"^[A-Za-z0-9-]{1,64}$")
RESERVED_NAMES = frozenset({"hartflow", "lead_agent"})
"""The built-in assistant's ids (``workers/api/discovery.py``): an agent of that name could never be run."""
MAX_SOUL_CHARS = 100_000


class AgentNameError(ValueError):
    """A name that breaks DeerFlow's rule."""


class AgentExistsError(Exception):
    """Create-only: the user has an agent of that name (or it is a built-in assistant's)."""


class AgentModelSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, ge=1)


class AgentFields(BaseModel):
    """What a user sets on an agent (DeerFlow's ``AgentCreateRequest`` without the name)."""

    model_config = ConfigDict(extra="forbid")

    description: str = Field("", max_length=2_000)
    model: str | None = Field(None, max_length=200)
    tool_groups: list[str] | None = Field(None, max_length=100)
    skills: list[str] | None = Field(None, max_length=500, description="None: every enabled skill; []: none")
    model_settings: AgentModelSettings | None = None
    thinking_enabled: bool | None = None
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    soul: str = Field("", max_length=MAX_SOUL_CHARS, description="SOUL.md: the agent's personality and rules")


class Agent(AgentFields):
    name: str
    graph_id: str = "lead_agent"
    """What LangGraph's ``/assistants`` shows: every agent runs the lead agent (as DeerFlow's compat layer)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    version: int = 1
    created_at: str = ""
    updated_at: str = ""

    def api_view(self) -> dict[str, Any]:
        """DeerFlow's ``AgentResponse`` (``frontend/src/core/agents/types.ts``)."""
        return self.model_dump(mode="json", include={"name", *AgentFields.model_fields})


def agent_name(name: str) -> str:
    """The stored form of a name (lowercase); :class:`AgentNameError` when it breaks DeerFlow's rule."""
    if not AGENT_NAME.match(name):
        raise AgentNameError(
            f"Invalid agent name {name[:80]!r}. Must match ^[A-Za-z0-9-]+$ (letters, digits, and hyphens only, "
            "at most 64)."
        )
    return name.lower()


def agent_key(user_id: str, name: str) -> str:
    return f"{_prefix(user_id)}{agent_name(name)}.json"


def _prefix(user_id: str) -> str:
    return f"users/{validate_user_id(user_id)}/agents/"


def _now() -> str:
    return datetime.now(UTC).isoformat()


class AgentsStore:
    """One user's agents in the object store (blocking: callers off an event loop use a worker thread)."""

    def __init__(self, objects: ObjectStore) -> None:
        self._objects = objects

    def get(self, user_id: str, name: str) -> Agent | None:
        raw = self._objects.get(agent_key(user_id, name))
        return None if raw is None else Agent.model_validate_json(raw)

    def list(self, user_id: str) -> list[Agent]:
        prefix = _prefix(user_id)
        found = []
        for info in self._objects.list(prefix):
            raw = self._objects.get(info.key)
            if raw is not None and info.key.endswith(".json"):
                found.append(Agent.model_validate_json(raw))
        return sorted(found, key=lambda agent: agent.name)

    def exists(self, user_id: str, name: str) -> bool:
        return agent_name(name) in RESERVED_NAMES or self._objects.exists(agent_key(user_id, name))

    def create(
        self, user_id: str, name: str, fields: AgentFields, *, graph_id: str = "lead_agent", metadata: Any = None
    ) -> Agent:
        stored = agent_name(name)
        if stored in RESERVED_NAMES:
            raise AgentExistsError(stored)
        stamp = _now()
        agent = Agent(
            name=stored,
            graph_id=graph_id,
            metadata=dict(metadata or {}),
            created_at=stamp,
            updated_at=stamp,
            **fields.model_dump(),
        )
        try:
            self._objects.put(agent_key(user_id, stored), agent.model_dump_json().encode(), if_absent=True)
        except ObjectExistsError:
            raise AgentExistsError(stored) from None
        return agent

    def update(self, user_id: str, name: str, changes: dict[str, Any]) -> Agent | None:
        """The agent with ``changes`` (already validated fields) applied and its version bumped; ``None`` when
        the user has no such agent."""
        agent = self.get(user_id, name)
        if agent is None:
            return None
        updated = Agent.model_validate(
            {**agent.model_dump(), **changes, "version": agent.version + 1, "updated_at": _now()}
        )
        self._objects.put(agent_key(user_id, name), updated.model_dump_json().encode())
        return updated

    def delete(self, user_id: str, name: str) -> bool:
        key = agent_key(user_id, name)
        if not self._objects.exists(key):
            return False
        self._objects.delete(key)
        return True
