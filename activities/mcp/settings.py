"""The ``mcp:`` section of ``hartflow.yaml`` and DeerFlow's ``extensions_config.json`` (its ``mcpServers``).

A server is DeerFlow's entry: ``enabled``, ``type`` (``stdio`` | ``sse`` | ``http``; DeerFlow also spells it
``transport``), ``command``/``args``/``env`` for stdio, ``url``/``headers`` for the others, ``description`` and
``tool_name_prefix``. A value that is exactly ``$NAME`` is read from the worker's environment when a session
is opened (:func:`resolve`), so the config, the run input and the history only ever hold the reference.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

_ENV_REFERENCE = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")
_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


class McpServerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    enabled: bool = True
    type: Literal["stdio", "sse", "http"] = Field("stdio", description="transport; DeerFlow's default is stdio")
    command: str | None = Field(None, description="stdio: the executable to start")
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(
        default_factory=dict, description="stdio: extra environment; '$NAME' reads the worker's NAME"
    )
    url: str | None = Field(None, description="sse/http: the endpoint")
    headers: dict[str, str] = Field(default_factory=dict, description="sse/http: '$NAME' reads the worker's NAME")
    description: str = ""
    tool_name_prefix: bool = Field(True, description="tools are named '<server>_<tool>' (DeerFlow's default)")

    @model_validator(mode="after")
    def _transport_fields(self) -> McpServerSettings:
        if self.type == "stdio" and not self.command:
            raise ValueError("a stdio server needs 'command'")
        if self.type != "stdio" and not self.url:
            raise ValueError(f"an {self.type} server needs 'url'")
        return self


class McpSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    servers: dict[str, McpServerSettings] = Field(default_factory=dict)
    config_file: Path | None = Field(
        None, description="DeerFlow's extensions_config.json: its mcpServers join servers (servers win on a name)"
    )
    api_stdio_commands: list[str] = Field(
        default_factory=list,
        description="commands a user's own stdio server may run (PUT /api/mcp/config, hartflow mcp set); "
        "empty: users add sse/http servers only",
    )

    @model_validator(mode="after")
    def _names(self) -> McpSettings:
        for name in self.servers:
            check_server_name(name)
        return self

    def effective(self) -> dict[str, McpServerSettings]:
        """Every configured server, enabled or not: the file's first, then ``servers`` (which win on a name)."""
        merged = dict(read_extensions_config(self.config_file)) if self.config_file is not None else {}
        merged.update(self.servers)
        return merged

    def enabled(self) -> dict[str, McpServerSettings]:
        return {name: server for name, server in self.effective().items() if server.enabled}


class McpConfigError(ValueError):
    """An MCP setting that cannot be used; the message names the file, the server and the key."""


def is_env_reference(value: str) -> bool:
    """``$NAME``: a value read from the worker's environment when a session opens."""
    return _ENV_REFERENCE.match(value) is not None


def check_server_name(name: str) -> None:
    if not _SERVER_NAME.match(name):
        raise ValueError(f"MCP server name {name!r} must be 1-40 letters, digits, '_' or '-' (it prefixes tool names)")


def read_extensions_config(path: Path) -> dict[str, McpServerSettings]:
    """DeerFlow's file as it is: its other sections (``skills``, ``mcpInterceptors``, ...) and the server keys
    hartflow does not implement (``oauth``, ``user_auth``, ...) are ignored; what it does read is validated."""
    try:
        data = json.loads(path.expanduser().read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise McpConfigError(f"mcp.config_file not found: {path}") from None
    except (OSError, ValueError) as exc:
        raise McpConfigError(f"mcp.config_file {path} is not readable JSON: {exc}") from None
    servers = data.get("mcpServers", {}) if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise McpConfigError(f"mcp.config_file {path}: 'mcpServers' must be an object")
    known = set(McpServerSettings.model_fields)
    result: dict[str, McpServerSettings] = {}
    for name, raw in servers.items():
        if not isinstance(raw, dict):
            raise McpConfigError(f"mcp.config_file {path}: server {name!r} must be an object")
        entry = {key: value for key, value in raw.items() if key in known}
        if "type" not in entry and "transport" in raw:
            entry["type"] = raw["transport"]
        try:
            check_server_name(name)
            result[name] = McpServerSettings.model_validate(entry)
        except (ValidationError, ValueError) as exc:
            raise McpConfigError(f"mcp.config_file {path}: server {name!r}: {_brief(exc)}") from None
    return result


def _brief(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']}" for e in exc.errors())
    return str(exc)


class ResolvedServer(BaseModel):
    """A server with its ``$NAME`` references read: lives only in the worker's memory, never logged."""

    model_config = ConfigDict(frozen=True)

    name: str
    settings: McpServerSettings
    env: dict[str, str]
    headers: dict[str, str]
    secrets: tuple[str, ...]
    """The values read from the environment, for :func:`redact`."""

    def fingerprint(self) -> str:
        """The pool key: the same server config with the same resolved values shares one session."""
        return json.dumps([self.name, self.settings.model_dump(mode="json"), self.env, self.headers], sort_keys=True)


def resolve(name: str, settings: McpServerSettings, environ: Mapping[str, str] | None = None) -> ResolvedServer:
    """Read ``$NAME`` values from the environment. A missing variable is an error naming it (not its value)."""
    source = os.environ if environ is None else environ
    secrets: list[str] = []

    def value(key: str, raw: str) -> str:
        match = _ENV_REFERENCE.match(raw)
        if match is None:
            return raw
        if match.group(1) not in source:
            raise McpConfigError(f"MCP server {name!r}: {key} refers to ${match.group(1)}, which is not set")
        secrets.append(source[match.group(1)])
        return source[match.group(1)]

    env = {key: value(f"env.{key}", raw) for key, raw in settings.env.items()}
    headers = {key: value(f"headers.{key}", raw) for key, raw in settings.headers.items()}
    return ResolvedServer(
        name=name, settings=settings, env=env, headers=headers, secrets=tuple(s for s in secrets if s)
    )


def redact(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with every resolved secret replaced, longest first (one may contain another)."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
