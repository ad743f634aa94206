"""SkillToolPolicy: an active skill's ``allowed-tools`` (its SKILL.md front matter) limits the agent's tools
(DeerFlow's ``SkillToolPolicyMiddleware``, always on, lead and subagents, right after SkillActivation).

Installing or enabling a skill only makes it discoverable; its policy applies once it is active: slash-activated
by the user in this run (SkillActivation's activation, which then dominates for the rest of the run: reading a
second skill cannot widen it), or read by the model (a SKILL.md read DurableContext captured in ``skill_context``).
With no active skill nothing changes.

Hooks
* ``wrap_model_call`` — request overlay: the policy is decided afresh (the ``skills.tool_policy`` activity: each
  active path must name an installed skill that is enabled for the user and available to the agent) and the tool
  schemas are filtered to the union of the active skills' ``allowed-tools`` plus the framework tools
  ``describe_skill``, ``read_file``, ``review_skill_package`` and ``tool_search``. No active skill declaring the
  field: all tools (legacy skills). None of the active paths authorised, or the activity failed: only the
  framework tools (fail closed).
* ``wrap_tool_call`` — with the decision for the same active paths: a call to another tool does not run and is
  answered ``Error: Tool '{name}' is not allowed by the active skill policy.`` (``status="error"``); a
  ``tool_search`` result loses the schemas and promotions of tools the policy removed (``No tools found matching
  the active skill policy.`` when none is left; a result it cannot check becomes ``Error: tool_search returned a
  result that could not be validated against the active skill policy.``).

Runs recorded before this middleware replay without it (the ``hartflow-skill-tool-policy`` patch).

Writes: request overlay; the tool result (thread state). Per-run memory: the decisions by active paths (not carried
across continue-as-new: the next execution decides again).

Parts: the activity ``activities/skill_catalog.py`` (``SkillActivities.tool_policy``, contract in
``vocabulary/contracts/skills.py``); the slash activation ``middlewares/skill_activation.py``; ``skill_context`` from
``middlewares/durable_context.py``. Tests: ``tests/test_skill_tool_policy.py``.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage

from middlewares import patches
from middlewares._activity_call import call_activity
from middlewares._logging import hook_logger
from middlewares.base import Command, Middleware, ModelHandler, ModelRequest, ToolCallRequest, ToolHandler, ToolResult
from middlewares.context import ActivityOptions, best_effort
from middlewares.skill_activation import SkillActivationMiddleware
from vocabulary.contracts import SKILL_TOOL_POLICY, SkillToolPolicyInput
from vocabulary.state import ThreadState

logger = hook_logger(__name__)

ALWAYS_AVAILABLE_TOOL_NAMES = frozenset({"describe_skill", "read_file", "review_skill_package", "tool_search"})
"""DeerFlow's ``ALWAYS_AVAILABLE_BUILTIN_TOOL_NAMES``: framework tools no skill policy removes."""
TOOL_SEARCH = "tool_search"
NOT_ALLOWED = "Error: Tool '{name}' is not allowed by the active skill policy."
TOOL_SEARCH_UNCHECKED = (
    "Error: tool_search returned a result that could not be validated against the active skill policy."
)
NO_TOOLS_LEFT = "No tools found matching the active skill policy."

Policy = tuple[str, tuple[str, ...]]
"""(source: ``slash`` or ``skill_context``, the active SKILL.md paths)."""


class SkillToolPolicyMiddleware(Middleware):
    def __init__(self, activation: SkillActivationMiddleware, *, available: list[str] | None = None) -> None:
        self._activation = activation
        self._available = available
        self._decisions: dict[Policy, frozenset[str] | None] = {}

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AIMessage:
        policy = self._policy(request.state)
        if policy is None or not request.ctx.patched(patches.SKILL_TOOL_POLICY):
            return await handler(request)
        allowed = await self._decide(request, policy)
        if allowed is None:
            return await handler(request)
        return await handler(request.override(tools=[tool for tool in request.tools if tool.name in allowed]))

    async def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolResult:
        policy = self._policy(request.state)
        if policy is None or not request.ctx.patched(patches.SKILL_TOOL_POLICY):
            return await handler(request)
        allowed = self._decisions[policy] if policy in self._decisions else await self._decide(request, policy)
        if allowed is None:
            return await handler(request)
        if request.name not in allowed:
            return ToolMessage(
                NOT_ALLOWED.format(name=request.name),
                tool_call_id=request.call_id or "missing_tool_call_id",
                name=request.name,
                status="error",
                id=request.ctx.uuid(),
            )
        result = await handler(request)
        return _filtered_search(request, result, allowed) if request.name == TOOL_SEARCH else result

    def _policy(self, state: ThreadState) -> Policy | None:
        slash = self._activation.active_skill_path
        if slash is not None:
            return "slash", (slash,)
        paths = tuple(str(entry["path"]) for entry in state.skill_context if isinstance(entry.get("path"), str))
        return ("skill_context", paths) if paths else None

    async def _decide(self, request: ModelRequest | ToolCallRequest, policy: Policy) -> frozenset[str] | None:
        """The tools the active skills allow with the framework tools, ``None`` for all; remembered for the
        tool calls of the answer."""
        ctx = request.ctx
        outcome = await best_effort(
            call_activity(
                ctx,
                SKILL_TOOL_POLICY,
                SkillToolPolicyInput(list(policy[1]), self._available, ctx.user_id),
                summary=f"SkillToolPolicy · {policy[0]} {', '.join(policy[1])}",
                options=ActivityOptions(local=True),
            )
        )
        allowed: frozenset[str] | None
        if isinstance(outcome, BaseException) or outcome.failed:
            logger.warning("no active skill could be authorised for allowed-tools; failing closed: %s", policy)
            allowed = ALWAYS_AVAILABLE_TOOL_NAMES
        else:
            allowed = None if outcome.allowed is None else frozenset(outcome.allowed) | ALWAYS_AVAILABLE_TOOL_NAMES
        self._decisions[policy] = allowed
        return allowed


def _filtered_search(request: ToolCallRequest, result: ToolResult, allowed: frozenset[str]) -> ToolResult:
    """``tool_search``'s result without the schemas and promotions of tools the policy removed."""
    unchecked = ToolMessage(
        TOOL_SEARCH_UNCHECKED, tool_call_id=request.call_id, name=TOOL_SEARCH, status="error", id=request.ctx.uuid()
    )
    if not isinstance(result, Command):
        return unchecked
    promoted, messages = result.update.get("promoted"), result.update.get("messages")
    names = promoted.get("names") if isinstance(promoted, dict) else None
    if not isinstance(messages, list) or len(messages) != 1 or not isinstance(names, list):
        return unchecked
    [message] = messages
    if not isinstance(message, ToolMessage) or message.name != TOOL_SEARCH:
        return unchecked
    permitted = [name for name in names if isinstance(name, str) and name in allowed]
    content = message.content
    if names:
        try:
            schemas = json.loads(content) if isinstance(content, str) else None
        except json.JSONDecodeError:
            schemas = None
        if not isinstance(schemas, list):
            return unchecked
        kept = [schema for schema in schemas if permitted_schema(schema, permitted)]
        content = json.dumps(kept, indent=2, ensure_ascii=False) if kept else NO_TOOLS_LEFT
    update = {
        **result.update,
        "promoted": {**promoted, "names": permitted},  # type: ignore[dict-item]
        "messages": [message.model_copy(update={"content": content})],
    }
    return Command(update=update, interrupt=result.interrupt)


def permitted_schema(schema: Any, permitted: list[str]) -> bool:
    """A schema of a permitted tool, in either shape (``{"name"}`` or OpenAI's ``{"function": {"name"}}``)."""
    if not isinstance(schema, dict):
        return False
    function = schema.get("function")
    return schema.get("name") in permitted or (isinstance(function, dict) and function.get("name") in permitted)
