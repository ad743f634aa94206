"""``hartflow mcp`` and ``hartflow agents``: the config user's MCP servers and custom agents, the same documents and
checks as the API's settings routes (``activities/mcp/overlay.py``, ``activities/agents_store.py``).

* ``mcp show`` (secrets as ``***``), ``mcp set FILE`` (a JSON ``{mcp_servers: {...}}``, as ``PUT /api/mcp/config``),
  ``mcp enable|disable NAME``;
* ``agents list``, ``agents show NAME``, ``agents create NAME [--description] [--model] [--soul-file] [--skill]
  [--tool-group]``, ``agents delete NAME``.

Refusals exit 2 and write nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from activities.agents_store import AgentExistsError, AgentFields, AgentNameError, AgentsStore, agent_name
from activities.mcp.overlay import McpUpdateError, load_overlay, replaced, save_overlay, toggled, view
from activities.paths import InvalidIdError, validate_user_id
from workers.api.agents_route import model_names
from workers.cli._common import EXIT_FAILED, EXIT_OK, BadInput, config_of, emit
from workers.config import open_object_store


def _user(config_user: str) -> str:
    try:
        return validate_user_id(config_user)
    except InvalidIdError as exc:
        raise BadInput(str(exc)) from None


def _name(args: argparse.Namespace, command: str) -> str:
    if not args.name:
        raise BadInput(f"{command} {args.action} needs NAME")
    return str(args.name)


def cmd_mcp(args: argparse.Namespace) -> int:
    config = config_of(args)
    user, objects, deployment = _user(config.user_id), open_object_store(config), config.mcp.effective()
    current = load_overlay(objects, user)
    try:
        if args.action == "set":
            if not args.name:
                raise BadInput("mcp set needs FILE: a JSON object {mcp_servers: {name: server}}")
            servers = _servers_of(Path(args.name))
            overlay = replaced(deployment, current, servers, config.mcp.api_stdio_commands)
        elif args.action in ("enable", "disable"):
            overlay = toggled(deployment, current, _name(args, "mcp"), args.action == "enable")
        else:
            overlay = current
    except McpUpdateError as exc:
        raise BadInput(str(exc)) from None
    if overlay is not current:
        save_overlay(objects, user, overlay)
    shown = view(deployment, overlay)

    def human() -> None:
        if not shown["mcp_servers"]:
            print("no MCP servers (hartflow.yaml's mcp: has none, and you added none)", file=sys.stderr)
        for name, server in shown["mcp_servers"].items():
            source = "config" if name in deployment else "yours"
            state = "on " if server["enabled"] else "off"
            print(f"{name:<24} {state} {source:<6} {server['type']:<5} {server['url'] or server['command']}")

    emit(args, shown, human)
    return EXIT_OK


def _servers_of(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: not a readable JSON file ({exc})") from None
    servers = data.get("mcp_servers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise BadInput(f"{path}: expected a JSON object with an object 'mcp_servers'")
    return servers


def cmd_agents(args: argparse.Namespace) -> int:
    config = config_of(args)
    user, store = _user(config.user_id), AgentsStore(open_object_store(config))
    try:
        if args.action == "list":
            rows = [agent.api_view() for agent in store.list(user)]
            emit(args, {"agents": rows}, lambda: _print_agents(rows))
            return EXIT_OK
        name = agent_name(_name(args, "agents"))
        if args.action == "create":
            agent = store.create(user, name, _fields(args, model_names(config)))
            emit(args, agent.api_view(), lambda: print(f"created agent {agent.name}"))
            return EXIT_OK
        if args.action == "delete":
            if not store.delete(user, name):
                print(f"hartflow: agent {name!r} not found", file=sys.stderr)
                return EXIT_FAILED
            emit(args, {"deleted": name}, lambda: print(f"deleted agent {name}"))
            return EXIT_OK
        found = store.get(user, name)
    except AgentNameError as exc:
        raise BadInput(str(exc)) from None
    except AgentExistsError:
        raise BadInput(f"agent {args.name.lower()!r} already exists") from None
    if found is None:
        print(f"hartflow: agent {name!r} not found", file=sys.stderr)
        return EXIT_FAILED
    shown = found.api_view()
    emit(args, shown, lambda: print(json.dumps(shown, indent=2, ensure_ascii=False)))
    return EXIT_OK


def _fields(args: argparse.Namespace, models: list[str]) -> AgentFields:
    if args.model and args.model not in models:
        raise BadInput(f"unknown model {args.model!r}: the configured models are {models}")
    try:
        soul = Path(args.soul_file).read_text(encoding="utf-8") if args.soul_file else ""
    except OSError as exc:
        raise BadInput(f"--soul-file: {exc}") from None
    try:
        return AgentFields(
            description=args.description or "",
            model=args.model,
            skills=args.skill,
            tool_groups=args.tool_group,
            soul=soul,
        )
    except ValidationError as exc:
        raise BadInput(str(exc.errors()[0]["msg"])) from None


def _print_agents(rows: list[dict[str, Any]]) -> None:
    if not rows:
        print("no agents (hartflow agents create NAME)", file=sys.stderr)
    for row in rows:
        print(f"{row['name']:<24} {row['model'] or '(default model)':<20} {row['description']}")
