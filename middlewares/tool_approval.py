"""ToolApproval: a person approves, edits or rejects a gated tool call before it runs (LangChain's
``HumanInTheLoopMiddleware``, with durable waits and an audit).

In the chain only when ``middlewares.tool_approval.rules`` (or the run's own rules) name a tool. Its place is in the
runtime base right after Guardrail, SandboxAudit and ReadBeforeWrite and right before ToolErrorHandling:

* after Guardrail, SandboxAudit and ReadBeforeWrite, so a call that policy blocks anyway never bothers a person,
  and an approved or edited call, which the run sends through the whole chain again, is checked by them once more:
  an edit cannot slip a blocked command past them;
* before ToolErrorHandling, which stays innermost around the tool: a tool failure after approval is still an error
  result, and a rejection is the reviewer's answer, not a tool failure to stamp;
* in the base, so subagents' calls are gated as the lead's are (asked on the lead run:
  ``workflows/run/approval_relay.py``).

Hook
* ``wrap_tool_call`` — a call without a review that a rule matches (tool name or glob, an MCP tool also as
  ``mcp:<server>:<tool>``; optional regular expressions its arguments must match) does not run: the result is a
  :class:`Command` whose ``interrupt`` is the call's action (``kind: approval_action``: LangChain's
  ``action_request`` and ``review_config``, the rule's timeout and on-timeout policy). The run gathers the turn's
  actions into one request, lets the turn's other calls finish, commits and pauses (the **side effect**). A call
  the run sends again with the reviewer's decision (``ToolCallRequest.review``): ``approve`` and ``edit`` (the
  run has put the edited args in the call) go on to the tool; ``reject`` answers with an error ToolMessage carrying
  the reviewer's reason (**thread state**), and the model goes on.

Per-run memory: none. Settings: ``middlewares.tool_approval`` in ``hartflow.yaml``; a run adds rules with the API's
``context.tool_approval`` / ``config.configurable.tool_approval`` (it cannot remove the configured ones).

Parts: the protocol ``vocabulary/approvals.py``; the gathering, pause and decisions in ``workflows/run/approval.py``
beside the clarification pause ``workflows/run/pause.py``, called from ``workflows/run/tools.py``; the ``review``
update and ``approval_review`` signal on ``workflows/run/workflow.py``; clients in ``workers/client/runs.py``
(``Runs.review``), ``workers/api/approvals.py`` (``command.resume`` with decisions) and
``workers/cli/approvals.py`` (``hartflow approve`` / ``reject``, ``hartflow runs --awaiting approval``); a
subagent's request relayed to its lead run by ``workflows/run/approval_relay.py``. Tests:
``tests/test_tool_approval.py``, ``tests/test_approval_clients.py``, ``tests/test_approval_card.py``,
``tests/test_subagent_approval.py``.
"""

from __future__ import annotations

import fnmatch
import json
import re
from typing import Any, Literal

from langchain_core.messages import ToolMessage
from pydantic import BaseModel, ConfigDict, Field, field_validator

from middlewares.base import Command, Middleware, ToolCallRequest, ToolHandler, ToolResult
from vocabulary.approvals import rejection_text
from vocabulary.tools import ToolSpec

Decision = Literal["approve", "edit", "reject"]
OnTimeout = Literal["approve", "reject"]
ACTION_KIND = "approval_action"
ALL_DECISIONS: tuple[Decision, ...] = ("approve", "edit", "reject")


class ApprovalRule(BaseModel):
    """One gated tool: ``tool`` is a name or a glob (``mcp:github:*``); ``args`` maps an argument name to a
    regular expression its text must contain (``{command: "git\\\\s+push"}``): all must match."""

    model_config = ConfigDict(extra="forbid")

    tool: str = Field(min_length=1)
    args: dict[str, str] = Field(default_factory=dict)
    allowed_decisions: list[Decision] = Field(default_factory=lambda: list(ALL_DECISIONS), min_length=1)
    description: str | None = Field(None, description="what the reviewer is shown (default: the tool and args)")
    timeout_seconds: float | None = Field(None, gt=0, description="default: tool_approval.timeout_seconds")
    on_timeout: OnTimeout | None = Field(None, description="default: tool_approval.on_timeout")

    @field_validator("args")
    @classmethod
    def _patterns_compile(cls, patterns: dict[str, str]) -> dict[str, str]:
        for name, pattern in patterns.items():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"args.{name}: not a regular expression: {exc}") from None
        return patterns

    def matches(self, names: list[str], args: Any) -> bool:
        if not any(fnmatch.fnmatchcase(name, self.tool) for name in names):
            return False
        values = args if isinstance(args, dict) else {}
        return all(
            name in values and re.search(pattern, _text(values[name])) is not None
            for name, pattern in self.args.items()
        )


class ToolApprovalConfig(BaseModel):
    """``middlewares.tool_approval``: the gated tools, and how long a request waits by default."""

    model_config = ConfigDict(extra="forbid")

    rules: list[ApprovalRule] = Field(default_factory=list)
    timeout_seconds: float = Field(24 * 3600, gt=0, description="how long a request waits for a decision")
    on_timeout: OnTimeout = Field("reject", description="the decision a call gets when nobody decided in time")

    def rule_for(self, name: str, tool: ToolSpec | None, args: Any) -> ApprovalRule | None:
        """The first rule gating this call, if any."""
        names = [name]
        if tool is not None and tool.server is not None and tool.remote_name is not None:
            names.append(f"mcp:{tool.server}:{tool.remote_name}")
        return next((rule for rule in self.rules if rule.matches(names, args)), None)


class ToolApprovalMiddleware(Middleware):
    def __init__(self, config: ToolApprovalConfig) -> None:
        self.config = config

    async def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolResult:
        review = request.review
        if review is not None:
            if review.get("type") != "reject":
                return await handler(request)
            return ToolMessage(
                rejection_text(request.name, request.call_id, review),
                tool_call_id=request.call_id,
                name=request.name,
                status="error",
                id=request.ctx.uuid(),
            )
        rule = self.config.rule_for(request.name, request.tool, request.args)
        if rule is None:
            return await handler(request)
        return Command(interrupt=self.action(rule, request))

    def action(self, rule: ApprovalRule, request: ToolCallRequest) -> dict[str, Any]:
        """The call's part of the request (LangChain's ``action_request`` and ``review_config``)."""
        args = request.args if isinstance(request.args, dict) else {}
        description = rule.description or (
            f"Tool execution requires approval\n\nTool: {request.name}\nArgs: {json.dumps(args, ensure_ascii=False)}"
        )
        return {
            "kind": ACTION_KIND,
            "tool_call_id": request.call_id,
            "action_request": {"name": request.name, "args": args, "description": description},
            "review_config": {"action_name": request.name, "allowed_decisions": list(rule.allowed_decisions)},
            "timeout_seconds": rule.timeout_seconds or self.config.timeout_seconds,
            "on_timeout": rule.on_timeout or self.config.on_timeout,
        }


def with_rules(config: ToolApprovalConfig, extra: list[ApprovalRule]) -> ToolApprovalConfig:
    """The configured rules first, then a run's own: a run can gate more calls, never fewer."""
    return config.model_copy(update={"rules": [*config.rules, *extra]})


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
