"""DeerFlow's ``tools:`` and ``tool_groups:`` lists (``bytedance/deer-flow:
backend/packages/harness/deerflow/config/tool_config.py``): each tool has a ``name``, a ``group`` and a ``use``
(``package.module:attribute``); every other key is a setting of that tool. Checked as a whole up front: a
malformed ``use``, a group no ``tool_groups`` entry names, or a name used twice is an error naming the key.

``$VAR`` settings are resolved where the tool is built (the worker, ``activities/configured_tools/build.py``),
never here: the config a client or a run carries keeps the variable's name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

USE_PATTERN = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$")

POLICY_KEYS = ("timeout_seconds", "heartbeat_seconds", "max_attempts")
"""hartflow's own per-tool settings (the activity's timeout, heartbeat and attempts), never passed to a factory."""


class ToolGroupEntry(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1, description="unique name of the group")


class ToolEntry(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$", description="the tool's name")
    group: str = Field(min_length=1, description="a name from tool_groups")
    use: str = Field(description="package.module:attribute (DeerFlow's own tools map to hartflow's)")

    @field_validator("use")
    @classmethod
    def _module_and_attribute(cls, use: str) -> str:
        if not USE_PATTERN.match(use):
            raise ValueError(f"{use!r} is not 'package.module:attribute'")
        return use

    @property
    def settings(self) -> dict[str, Any]:
        """The entry's own keys (``max_results``, ``base_url``, ``api_key: $VAR``, ...), unresolved."""
        return dict(self.model_extra or {})

    def policy(self) -> dict[str, Any]:
        return {key: value for key, value in self.settings.items() if key in POLICY_KEYS}


def check_tool_entries(tools: list[ToolEntry], groups: list[ToolGroupEntry]) -> None:
    """Raise ``ValueError`` naming the key (``tools.N.group``, ``tools.N.name``, ``tool_groups.N.name``)."""
    group_names: set[str] = set()
    for index, group in enumerate(groups):
        if group.name in group_names:
            raise ValueError(f"tool_groups.{index}.name: group {group.name!r} is listed twice")
        group_names.add(group.name)
    names: set[str] = set()
    for index, tool in enumerate(tools):
        if tool.group not in group_names:
            known = ", ".join(repr(name) for name in sorted(group_names)) or "none"
            raise ValueError(f"tools.{index}.group: unknown group {tool.group!r} (tool_groups has {known})")
        if tool.name in names:
            raise ValueError(f"tools.{index}.name: tool {tool.name!r} is listed twice")
        names.add(tool.name)
        for key in POLICY_KEYS:
            value = tool.settings.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
                raise ValueError(f"tools.{index}.{key}: must be a positive number")


def in_groups(tools: list[ToolEntry], groups: list[str] | None) -> list[str]:
    """The names of the tools a run gets: all of them, or those of ``groups`` (a custom agent's ``tool_groups``,
    DeerFlow's ``get_available_tools(groups=...)``)."""
    return [tool.name for tool in tools if groups is None or tool.group in groups]


def resolve_value(value: Any, environ: Mapping[str, str], where: str) -> Any:
    """A setting with ``$VAR`` strings replaced by the environment's value (nested lists and mappings too)."""
    if isinstance(value, str) and value.startswith("$") and len(value) > 1:
        name = value[1:]
        if name not in environ:
            raise KeyError(f"{where}: environment variable {name} is not set")
        return environ[name]
    if isinstance(value, list):
        return [resolve_value(item, environ, where) for item in value]
    if isinstance(value, dict):
        return {key: resolve_value(item, environ, f"{where}.{key}") for key, item in value.items()}
    return value
