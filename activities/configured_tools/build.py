"""Build a ``tools:`` entry on the worker: ``$VAR`` settings resolved from the worker's environment, the ``use``
imported, the result a :class:`BuiltTool` (its schema, where it comes from, how it runs).

What ``use`` names decides what runs:

* ``deerflow.sandbox.tools:<tool>_tool`` — hartflow's built-in sandbox tool of that name (never built here: the run
  offers its built-in; :func:`sandbox_tool_of`);
* ``deerflow.community.*`` — hartflow's web tools (``activities/web/tools.py``);
* a :func:`~activities.configured_tools.kinds.durable_tool` function or an
  :func:`~activities.configured_tools.kinds.activity_as_tool`;
* a LangChain ``BaseTool``, or a class or factory returning one (called with the entry's settings as keyword
  arguments, hartflow's ``timeout_seconds``/``heartbeat_seconds``/``max_attempts`` left out).
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from activities.configured_tools.entries import POLICY_KEYS, ToolEntry, resolve_value
from activities.configured_tools.kinds import ActivityTool, DurableTool, ToolPolicy, as_text
from activities.web.tools import is_web_use, web_tool
from vocabulary.contracts.configured_tools import TOOLS_CALL, ConfiguredToolInfo
from vocabulary.tools import BUILTIN_TOOLS, ToolExecution

SANDBOX_MODULE = "deerflow.sandbox.tools:"
SANDBOX_TOOL_NAMES = frozenset(tool.name for tool in BUILTIN_TOOLS if tool.sandbox)
RESERVED_NAMES = frozenset(tool.name for tool in BUILTIN_TOOLS) | {"task", "view_image", "tool_search"}


class ToolBuildError(ValueError):
    """An entry that cannot be built; the message names the key (``tools.N...``)."""


@dataclass(frozen=True)
class BuiltTool:
    info: ConfiguredToolInfo
    run: Callable[[dict[str, Any]], Awaitable[str]] | None
    """``None`` for an ``activity_as_tool``: the run schedules the team's activity itself."""


def sandbox_tool_of(use: str) -> str | None:
    """The built-in sandbox tool ``use`` names (``deerflow.sandbox.tools:bash_tool`` → ``bash``), else ``None``."""
    if not use.startswith(SANDBOX_MODULE):
        return None
    name = use.removeprefix(SANDBOX_MODULE).removesuffix("_tool")
    return name if name in SANDBOX_TOOL_NAMES else None


def check_use(index: int, entry: ToolEntry) -> None:
    """What the config can check without importing anything (``ValueError`` naming the key)."""
    builtin = sandbox_tool_of(entry.use)
    if entry.use.startswith(SANDBOX_MODULE) and builtin is None:
        raise ValueError(f"tools.{index}.use: {entry.use!r} is not one of DeerFlow's sandbox tools")
    if builtin is None and entry.name in RESERVED_NAMES:
        raise ValueError(f"tools.{index}.name: {entry.name!r} is the name of a built-in tool")
    if builtin is not None and entry.name != builtin:
        raise ValueError(f"tools.{index}.name: {entry.use!r} is the built-in {builtin!r}; name it so")
    if is_web_use(entry.use):
        web_tool(entry.use, {})  # only whether hartflow has it; settings are the worker's
    elif builtin is None and entry.use.startswith("deerflow."):
        raise ValueError(f"tools.{index}.use: {entry.use!r} is a DeerFlow tool hartflow does not have")


def build_tool(index: int, entry: ToolEntry, environ: Mapping[str, str]) -> BuiltTool:
    where = f"tools.{index}"
    try:
        settings = {key: resolve_value(value, environ, f"{where}.{key}") for key, value in entry.settings.items()}
    except KeyError as exc:
        raise ToolBuildError(str(exc.args[0])) from None
    policy = ToolPolicy(**{key: settings[key] for key in POLICY_KEYS if key in settings})
    if is_web_use(entry.use):
        web = web_tool(entry.use, settings)
        return _built(entry, web.spec.description, web.spec.parameters, web.source, ToolPolicy(), policy, web.run)
    target = _resolve(where, entry.use, {key: value for key, value in settings.items() if key not in POLICY_KEYS})
    if isinstance(target, DurableTool):
        return _built(
            entry, target.description, target.parameters, f"function:{entry.use}", target.policy, policy, target.run
        )
    if isinstance(target, ActivityTool):
        info = _built(entry, target.description, target.parameters, "", target.policy, policy, None).info
        execution = replace(info.execution, activity=target.activity, task_queue=target.task_queue)
        return BuiltTool(
            replace(info, source=f"activity:{target.activity}@{target.task_queue}", execution=execution), None
        )
    function = convert_to_openai_tool(target)["function"]
    parameters = function.get("parameters") or {"type": "object", "properties": {}}
    return _built(
        entry, target.description, parameters, f"langchain:{entry.use}", ToolPolicy(), policy, _langchain_runner(target)
    )


def _resolve(where: str, use: str, settings: dict[str, Any]) -> BaseTool | DurableTool | ActivityTool:
    module_name, _, attribute = use.partition(":")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ToolBuildError(f"{where}.use: cannot import {use!r}: {exc}") from None
    if isinstance(found, BaseTool | DurableTool | ActivityTool):
        return found
    if not callable(found):
        raise ToolBuildError(f"{where}.use: {use!r} is neither a tool nor a factory of one")
    try:
        made = found(**settings)
    except Exception as exc:  # a factory's own error, reported with the key that configured it
        raise ToolBuildError(
            f"{where}: {use!r} failed with the entry's settings: {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(made, BaseTool | DurableTool | ActivityTool):
        raise ToolBuildError(f"{where}.use: {use!r} returned {type(made).__name__}, not a LangChain BaseTool")
    return made


def _built(
    entry: ToolEntry,
    description: str,
    parameters: dict[str, Any],
    source: str,
    own: ToolPolicy,
    configured: ToolPolicy,
    run: Callable[[dict[str, Any]], Awaitable[str]] | None,
) -> BuiltTool:
    def pick(key: str) -> Any:
        value = getattr(configured, key)
        return value if value is not None else getattr(own, key)

    execution = ToolExecution(
        TOOLS_CALL.name,
        timeout_seconds=pick("timeout_seconds"),
        heartbeat_seconds=pick("heartbeat_seconds"),
        max_attempts=pick("max_attempts"),
    )
    return BuiltTool(ConfiguredToolInfo(entry.name, description, parameters, source, execution), run)


def _langchain_runner(tool: BaseTool) -> Callable[[dict[str, Any]], Awaitable[str]]:
    async def run(args: dict[str, Any]) -> str:
        result = await tool.ainvoke(args)
        return as_text(result.content if isinstance(result, ToolMessage) else result)

    return run
