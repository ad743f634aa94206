"""A user's own MCP settings beside the deployment's: what ``PUT/PATCH /api/mcp/config`` and ``hartflow mcp set``
write, and what the worker reads when one of that user's runs opens a session.

Per user, never per deployment: with ``api.auth: bearer`` every user is a tenant, and a deployment-wide list any
of them could edit would let one user point everyone's runs at a server of theirs. The deployment's servers
(``hartflow.yaml``'s ``mcp:``) stay the operator's: a user can only switch them off (or back on) for their own
runs; servers the config disabled stay off. A user's own servers are validated exactly like ``mcp.servers``
entries (:class:`~activities.mcp.settings.McpServerSettings`) and then more strictly, because they come from
outside: no ``$NAME`` values (those read the worker's environment), and a ``stdio`` server only with a command
the operator listed in ``mcp.api_stdio_commands`` (a stdio server is a process on the worker).

Layout: ``users/{user_id}/settings/mcp.json`` of the object store. The run carries only server names
(``RunSettings.mcp_servers``); the values, secrets included, stay in storage and in the worker's memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from activities.mcp.settings import McpServerSettings, ResolvedServer, check_server_name, is_env_reference
from activities.paths import validate_user_id
from activities.storage import ObjectStore

MASK = "***"
"""What a secret value reads as in every view (DeerFlow's mask): sending it back keeps the stored value."""
MAX_USER_SERVERS = 50


class McpOverlay(BaseModel):
    """What one user changed: their own servers, and deployment servers they switched off or on."""

    model_config = ConfigDict(extra="forbid")

    servers: dict[str, McpServerSettings] = Field(default_factory=dict)
    enabled: dict[str, bool] = Field(default_factory=dict)
    """Deployment servers by name: ``False`` keeps one out of this user's runs."""


class McpUpdateError(ValueError):
    """A refused update; ``status`` is the HTTP status that says why (404 unknown, 409 conflict, 422 invalid)."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


def overlay_key(user_id: str) -> str:
    return f"users/{validate_user_id(user_id)}/settings/mcp.json"


def load_overlay(objects: ObjectStore, user_id: str) -> McpOverlay:
    raw = objects.get(overlay_key(user_id))
    return McpOverlay() if raw is None else McpOverlay.model_validate_json(raw)


def save_overlay(objects: ObjectStore, user_id: str, overlay: McpOverlay) -> None:
    objects.put(overlay_key(user_id), overlay.model_dump_json(exclude_defaults=True).encode())


def enabled_names(deployment: Mapping[str, McpServerSettings], overlay: McpOverlay) -> list[str]:
    """The servers a run of this user gets: the deployment's enabled ones the user kept on, then their own."""
    names = [name for name, server in deployment.items() if server.enabled and overlay.enabled.get(name, True)]
    return names + [name for name, server in overlay.servers.items() if server.enabled and name not in deployment]


def view(deployment: Mapping[str, McpServerSettings], overlay: McpOverlay) -> dict[str, Any]:
    """``{mcp_servers: {name: server}}`` as DeerFlow's settings page reads it, every env and header value masked."""
    servers: dict[str, Any] = {}
    for name, server in deployment.items():
        shown = server.model_copy(update={"enabled": server.enabled and overlay.enabled.get(name, True)})
        servers[name] = _masked(shown)
    for name, server in overlay.servers.items():
        servers.setdefault(name, _masked(server))
    return {"mcp_servers": servers}


def _masked(server: McpServerSettings) -> dict[str, Any]:
    shown = server.model_dump(mode="json")
    shown["env"] = dict.fromkeys(server.env, MASK)
    shown["headers"] = dict.fromkeys(server.headers, MASK)
    return shown


def replaced(
    deployment: Mapping[str, McpServerSettings],
    current: McpOverlay,
    incoming: Mapping[str, Any],
    stdio_commands: list[str],
) -> McpOverlay:
    """The overlay after a ``PUT`` of the whole list: the user's own servers are the incoming ones (an omitted one
    is removed); a deployment server takes only ``enabled`` (an omitted one keeps its state; any other change is
    409: it is configured in ``hartflow.yaml``)."""
    overlay = McpOverlay(enabled=dict(current.enabled))
    own = {name: raw for name, raw in incoming.items() if name not in deployment}
    if len(own) > MAX_USER_SERVERS:
        raise McpUpdateError(f"at most {MAX_USER_SERVERS} MCP servers of your own")
    for name, raw in incoming.items():
        if name in deployment:
            overlay.enabled[name] = _deployment_toggle(name, deployment[name], raw)
    for name, raw in own.items():
        overlay.servers[name] = user_server(name, raw, current.servers.get(name), stdio_commands)
    overlay.enabled = {name: on for name, on in overlay.enabled.items() if not on}
    return overlay


def toggled(deployment: Mapping[str, McpServerSettings], current: McpOverlay, name: str, enabled: bool) -> McpOverlay:
    """The overlay after a ``PATCH`` of one server's ``enabled`` (DeerFlow's switch on the settings page)."""
    overlay = current.model_copy(deep=True)
    if name in deployment:
        if enabled and not deployment[name].enabled:
            raise McpUpdateError(
                f"MCP server {name!r} is disabled in hartflow.yaml: only the operator can enable it", 409
            )
        overlay.enabled.pop(name, None)
        if not enabled:
            overlay.enabled[name] = False
    elif name in overlay.servers:
        overlay.servers[name] = overlay.servers[name].model_copy(update={"enabled": enabled})
    else:
        raise McpUpdateError(f"MCP server {name!r} not found", 404)
    return overlay


def _deployment_toggle(name: str, server: McpServerSettings, raw: Any) -> bool:
    if not isinstance(raw, dict) or not isinstance(raw.get("enabled", True), bool):
        raise McpUpdateError(f"mcp_servers.{name}: must be an object with a boolean 'enabled'")
    enabled = bool(raw.get("enabled", True))
    if {**_masked(server), "enabled": enabled} != {**_masked(server), **raw, "enabled": enabled}:
        raise McpUpdateError(
            f"MCP server {name!r} is configured in hartflow.yaml: only 'enabled' can be changed here", 409
        )
    if enabled and not server.enabled:
        raise McpUpdateError(f"MCP server {name!r} is disabled in hartflow.yaml: only the operator can enable it", 409)
    return enabled


def user_server(name: str, raw: Any, stored: McpServerSettings | None, stdio_commands: list[str]) -> McpServerSettings:
    """One of the user's own servers, checked like ``mcp.servers`` and then as input from outside; ``***`` keeps
    the stored value of that key."""
    try:
        check_server_name(name)
        server = McpServerSettings.model_validate(raw)
    except (ValidationError, ValueError) as exc:
        raise McpUpdateError(f"mcp_servers.{name}: {_brief(exc)}") from None
    env = _unmasked(name, "env", server.env, stored.env if stored else {})
    headers = _unmasked(name, "headers", server.headers, stored.headers if stored else {})
    if server.type == "stdio" and server.command not in stdio_commands:
        allowed = ", ".join(stdio_commands) or "none"
        raise McpUpdateError(
            f"mcp_servers.{name}: stdio command {server.command!r} is not allowed here (mcp.api_stdio_commands: "
            f"{allowed}); a stdio server runs on the worker"
        )
    return server.model_copy(update={"env": env, "headers": headers})


def _unmasked(name: str, field: str, values: dict[str, str], stored: dict[str, str]) -> dict[str, str]:
    result = {}
    for key, value in values.items():
        if is_env_reference(value):
            raise McpUpdateError(f"mcp_servers.{name}.{field}.{key}: '$NAME' values are for hartflow.yaml only")
        if value == MASK:
            if key not in stored:
                raise McpUpdateError(f"mcp_servers.{name}.{field}.{key}: '***' keeps a stored value; there is none")
            value = stored[key]
        result[key] = value
    return result


def resolved_user_server(name: str, server: McpServerSettings) -> ResolvedServer:
    """A user's server as the session pool opens it: its values are literal, and all of them are secrets."""
    values = tuple(value for value in (*server.env.values(), *server.headers.values()) if value)
    return ResolvedServer(
        name=name, settings=server, env=dict(server.env), headers=dict(server.headers), secrets=values
    )


def _brief(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'entry'}: {str(e['msg']).removeprefix('Value error, ')}"
            for e in exc.errors()
        )
    return str(exc)
