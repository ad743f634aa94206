"""The chain builder: DeerFlow's two segments, assembled from the run's settings.

DeerFlow builds them in ``bytedance/deer-flow:
backend/packages/harness/deerflow/agents/middlewares/tool_error_handling_middleware.py``
(``_build_runtime_middlewares``, ``build_subagent_runtime_middlewares``) and ``bytedance/deer-flow:
backend/packages/harness/deerflow/agents/lead_agent/agent.py`` (``build_middlewares``).

* :func:`runtime_base` — the segment lead agents and subagents share (``_build_runtime_middlewares``, the seed's
  first table);
* :func:`lead_tail` — the lead-only segment (``build_middlewares``, the seed's second table), ending with
  Clarification, which must stay last so it intercepts ``ask_clarification`` innermost;
* :func:`build_subagent_chain` — a subagent's chain (``build_subagent_runtime_middlewares``): the base without
  Uploads, then SkillActivation, SkillToolPolicy, ViewImage, DeferredToolFilter, LoopDetection, TokenBudget (on by
  default), extensions, SafetyFinishReason, DurableContext, Summarization, SubagentDateContext,
  SystemMessageCoalescing — no DynamicContext, TokenUsage, Title, Memory, TodoList, SubagentLimit,
  TerminalResponse, ModelLengthFinishReason or Clarification.

Conditional middlewares (the seed's ``?``) are included exactly when their condition holds, written inline
here as in DeerFlow's ``build_middlewares`` so the conditions read in one place. The chain of a run is
logged at run start and exposed by the run's ``chain`` query.
"""

from __future__ import annotations

from collections.abc import Sequence

from middlewares.base import Middleware
from middlewares.clarification import ClarificationMiddleware
from middlewares.dangling_tool_call import DanglingToolCallMiddleware
from middlewares.deferred_tool_filter import DeferredToolFilterMiddleware
from middlewares.durable_context import DurableContextMiddleware
from middlewares.dynamic_context import DynamicContextMiddleware
from middlewares.guardrail import GuardrailMiddleware
from middlewares.input_sanitization import InputSanitizationMiddleware
from middlewares.llm_error_handling import LLMErrorHandlingMiddleware
from middlewares.loop_detection import LoopDetectionMiddleware
from middlewares.mcp_routing import McpRoutingMiddleware
from middlewares.memory import MemoryMiddleware
from middlewares.model_length_finish_reason import ModelLengthFinishReasonMiddleware
from middlewares.read_before_write import ReadBeforeWriteMiddleware
from middlewares.run_settings import RunSettings
from middlewares.safety_finish_reason import SafetyFinishReasonMiddleware
from middlewares.sandbox import SandboxMiddleware
from middlewares.sandbox_audit import SandboxAuditMiddleware
from middlewares.skill_activation import SkillActivationMiddleware
from middlewares.skill_tool_policy import SkillToolPolicyMiddleware
from middlewares.subagent_date_context import SubagentDateContextMiddleware
from middlewares.subagent_limit import SubagentLimitMiddleware
from middlewares.summarization import SummarizationMiddleware
from middlewares.system_message_coalescing import SystemMessageCoalescingMiddleware
from middlewares.terminal_response import TerminalResponseMiddleware
from middlewares.thread_data import ThreadDataMiddleware
from middlewares.title import TitleMiddleware
from middlewares.todo_list import TodoListMiddleware
from middlewares.token_budget import TokenBudgetMiddleware, default_subagent_budget
from middlewares.token_usage import TokenUsageMiddleware
from middlewares.tool_approval import ToolApprovalMiddleware
from middlewares.tool_error_handling import ToolErrorHandlingMiddleware
from middlewares.tool_output_budget import ToolOutputBudgetMiddleware
from middlewares.tool_progress import ToolProgressMiddleware
from middlewares.tool_result_sanitization import ToolResultSanitizationMiddleware
from middlewares.uploads import UploadsMiddleware
from middlewares.view_image import ViewImageMiddleware
from vocabulary.class_path import ClassPathError, load_class_path
from vocabulary.tools import ToolSpec


def runtime_base(settings: RunSettings, *, include_uploads: bool, owns_sandbox: bool = True) -> list[Middleware]:
    """The segment every agent shares, outermost first (DeerFlow's ``_build_runtime_middlewares``).
    ``owns_sandbox=False`` (subagents): the sandbox is the lead run's, which releases it."""
    mws = settings.middlewares
    chain: list[Middleware] = [
        InputSanitizationMiddleware(),  # always, outermost: every inner middleware and retry sees the framed input
        ToolOutputBudgetMiddleware(mws.tool_output),  # always; it checks its own ``enabled``
        ToolResultSanitizationMiddleware(),  # always, inside the budget: it neutralises the raw web output first
        ThreadDataMiddleware(mws.thread_data),
    ]
    if include_uploads:
        chain.append(UploadsMiddleware(mws.uploads))
    chain.append(SandboxMiddleware(mws.sandbox, release=owns_sandbox))
    chain.append(DanglingToolCallMiddleware())  # DeerFlow's include_dangling_tool_call_patch: lead and subagent
    chain.append(LLMErrorHandlingMiddleware(mws.llm_error_handling))  # always
    if mws.guardrails.enabled and mws.guardrails.provider:
        chain.append(GuardrailMiddleware.from_config(mws.guardrails))
    chain.append(SandboxAuditMiddleware())  # always: DeerFlow has no config gate
    if mws.read_before_write.enabled:  # on by default; outside ToolApproval: a blocked write bothers no reviewer
        chain.append(ReadBeforeWriteMiddleware())
    if mws.tool_progress.enabled:  # off by default; outside ToolErrorHandling, whose verdicts it reads
        chain.append(ToolProgressMiddleware(mws.tool_progress))
    if mws.tool_approval.rules:  # after the policy checks, which see an approved call again: its docstring says why
        chain.append(ToolApprovalMiddleware(mws.tool_approval))
    skills = mws.summarization  # DeerFlow reads the skills root and the read tools from the same settings
    chain.append(  # last of the base: innermost, right around the tool
        ToolErrorHandlingMiddleware(
            skills_root=skills.skills_container_path, skill_read_tool_names=skills.skill_file_read_tool_names
        )
    )
    return chain


def lead_tail(settings: RunSettings, *, mcp_tools: Sequence[ToolSpec] = ()) -> list[Middleware]:
    """The lead agent's segment (DeerFlow's ``build_middlewares``). Clarification is always last. ``mcp_tools``:
    the run's discovered MCP tools, deferred (with McpRouting right before DeferredToolFilter) when tool_search
    is on."""
    mws = settings.middlewares
    chain: list[Middleware] = [
        DynamicContextMiddleware(mws.dynamic_context),  # always: the system prompt stays static
        *_skills(settings),  # SkillActivation, SkillToolPolicy: always
        _durable_context(settings),  # always
    ]
    if mws.summarization.enabled:
        chain.append(SummarizationMiddleware(mws.summarization))
    if settings.plan_mode:
        chain.append(TodoListMiddleware())
    if mws.token_usage.enabled:
        chain.append(TokenUsageMiddleware(mws.token_usage))
    chain.append(TitleMiddleware(mws.title))  # always: it checks its own ``enabled``
    chain.append(MemoryMiddleware(mws.memory))  # always: it checks its own ``enabled`` when the run ends
    if settings.model_capabilities.vision:
        chain.append(ViewImageMiddleware())
    chain.extend(_deferred_tools(settings, mcp_tools))
    chain.append(SystemMessageCoalescingMiddleware())  # always
    if settings.subagent_enabled:
        chain.append(SubagentLimitMiddleware(settings.subagents))  # it also brings the ``task`` tool
    if mws.loop_detection.enabled:
        chain.append(LoopDetectionMiddleware(mws.loop_detection))
    if mws.token_budget.enabled:
        chain.append(TokenBudgetMiddleware(mws.token_budget))
    chain.extend(load_extension(spec)() for spec in settings.extensions)
    chain.append(TerminalResponseMiddleware())  # always
    chain.append(ModelLengthFinishReasonMiddleware())  # always
    # After LoopDetection (and the extensions): after_model runs in reverse, so Safety sees the raw response first.
    if mws.safety_finish_reason.enabled:
        chain.append(SafetyFinishReasonMiddleware.from_config(mws.safety_finish_reason))
    chain.append(ClarificationMiddleware(non_interactive=settings.non_interactive))
    return chain


def _deferred_tools(settings: RunSettings, mcp_tools: Sequence[ToolSpec]) -> list[Middleware]:
    """McpRouting (when MCP tools are deferred) and DeferredToolFilter (when anything is), in that order."""
    search = settings.middlewares.tool_search
    deferred_mcp = list(mcp_tools) if search.enabled else []
    if not (search.enabled and (search.deferred or deferred_mcp)):
        return []
    deferred = DeferredToolFilterMiddleware(search, mcp_tools=deferred_mcp)
    if not deferred_mcp:
        return [deferred]
    return [McpRoutingMiddleware(deferred_mcp, deferred.catalog.hash, search.auto_promote_top_k), deferred]


def _skills(settings: RunSettings) -> list[Middleware]:
    """SkillActivation and right after it SkillToolPolicy, which applies the activated skill's allowed-tools."""
    activation = SkillActivationMiddleware(settings.middlewares.skill_activation)
    available = settings.middlewares.skill_activation.available_skills
    return [activation, SkillToolPolicyMiddleware(activation, available=available)]


def _durable_context(settings: RunSettings) -> Middleware:
    skills = settings.middlewares.summarization  # DeerFlow reads the skills root and the read tools from these too
    return DurableContextMiddleware(
        skills_root=skills.skills_container_path, skill_read_tool_names=skills.skill_file_read_tool_names
    )


def subagent_tail(settings: RunSettings) -> list[Middleware]:
    """A subagent's segment after the base, in the order of DeerFlow's ``build_subagent_runtime_middlewares``."""
    mws = settings.middlewares
    chain: list[Middleware] = _skills(settings)
    if settings.model_capabilities.vision:
        chain.append(ViewImageMiddleware())
    if mws.tool_search.enabled and mws.tool_search.deferred:
        chain.append(DeferredToolFilterMiddleware(mws.tool_search))
    if mws.loop_detection.enabled:
        chain.append(LoopDetectionMiddleware(mws.loop_detection))
    budget = mws.subagent_token_budget or default_subagent_budget(summarization_enabled=mws.summarization.enabled)
    if budget.enabled:
        chain.append(TokenBudgetMiddleware(budget))
    chain.extend(load_extension(spec)() for spec in settings.extensions)
    if mws.safety_finish_reason.enabled:
        chain.append(SafetyFinishReasonMiddleware.from_config(mws.safety_finish_reason))
    chain.append(_durable_context(settings))
    if mws.summarization.enabled:
        chain.append(SummarizationMiddleware(mws.summarization))
    chain.append(SubagentDateContextMiddleware(mws.dynamic_context))
    chain.append(SystemMessageCoalescingMiddleware())
    return chain


def build_lead_chain(settings: RunSettings, *, mcp_tools: Sequence[ToolSpec] = ()) -> list[Middleware]:
    return [*runtime_base(settings, include_uploads=True), *lead_tail(settings, mcp_tools=mcp_tools)]


def build_subagent_chain(settings: RunSettings) -> list[Middleware]:
    return [*runtime_base(settings, include_uploads=False, owns_sandbox=False), *subagent_tail(settings)]


def describe(chain: list[Middleware]) -> list[str]:
    return [mw.name for mw in chain]


class ExtensionError(ValueError):
    """An ``extensions`` entry that does not name a Middleware class."""


def load_extension(spec: str) -> type[Middleware]:
    """Resolve ``module:Class`` (DeerFlow's configured extension middlewares: zero-arg, fail loudly)."""
    try:
        return load_class_path(spec, Middleware)
    except ClassPathError as exc:
        raise ExtensionError(f"extension {spec!r}: {exc}") from None
