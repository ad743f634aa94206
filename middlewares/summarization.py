"""Summarization: compact old history into ``summary_text`` when the conversation grows too long
(DeerFlow's ``DeerFlowSummarizationMiddleware`` over langchain's ``SummarizationMiddleware``).

Hooks
* ``before_model`` — counts the history (plus the existing summary, as a ``name="summary"`` message) with
  langchain's ``count_tokens_approximately`` and checks the triggers (``messages`` / ``tokens`` /
  ``fraction`` of ``run.model_capabilities.max_input_tokens``; a list means any). When one fires, the cutoff
  from ``keep`` is moved so an AIMessage and its ToolMessages stay on one side; from the older slice it rescues
  the recent ``/mnt/skills`` file reads (within ``preserve_recent_skill_count`` / ``_tokens`` /
  ``_tokens_per_skill``), SystemMessages, DynamicContext reminders and the latest real user message (by id).
  The rest is summarised by a model activity (``model.invoke``, purpose ``summarization``: the configured
  ``model``, then the run's model as a fallback). Result in **thread state**:
  ``{"messages": [RemoveMessage(REMOVE_ALL_MESSAGES), *preserved], "summary_text": summary}``. A failed or
  blank summary leaves the history untouched for this turn.
* ``wrap_model_call`` — **request overlay**: DeerFlow's DurableContext projects ``summary_text`` into every
  request; hartflow has no DurableContext, so this hook puts the summary in front of the history as the
  ``name="summary"`` HumanMessage langchain used to keep in state.

Everything but the summary call is pure and deterministic, so it runs in the workflow.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    get_buffer_string,
    trim_messages,
)
from langchain_core.messages.utils import count_tokens_approximately
from pydantic import BaseModel, ConfigDict, Field, model_validator
from temporalio.exceptions import ActivityError

from middlewares._logging import hook_logger
from middlewares._messages import SUMMARY_MESSAGE_NAME, is_dynamic_context_reminder, is_genuine_user_message
from middlewares._model_call import call_model
from middlewares._tool_calls import clone_with_tool_calls
from middlewares.base import Middleware, ModelHandler, ModelRequest
from workflows.context import RunContext, best_effort
from workflows.messages import REMOVE_ALL_MESSAGES, message_text
from workflows.state import StateUpdate, ThreadState

logger = hook_logger(__name__)

# langchain's DEFAULT_SUMMARY_PROMPT (langchain 1.3), which DeerFlow uses when ``summary_prompt`` is unset.
DEFAULT_SUMMARY_PROMPT = """<role>
Context Extraction Assistant
</role>

<primary_objective>
Your sole objective in this task is to extract the highest quality/most relevant context from the conversation history below.
</primary_objective>

<objective_information>
You're nearing the total number of input tokens you can accept, so you must extract the highest quality/most relevant pieces of information from your conversation history.
This context will then overwrite the conversation history presented below. Because of this, ensure the context you extract is only the most important information to continue working toward your overall goal.
</objective_information>

<instructions>
The conversation history below will be replaced with the context you extract in this step.
You want to ensure that you don't repeat any actions you've already completed, so the context you extract from the conversation history should be focused on the most important information to your overall goal.

You should structure your summary using the following sections. Each section acts as a checklist - you must populate it with relevant information or explicitly state "None" if there is nothing to report for that section:

## SESSION INTENT
What is the user's primary goal or request? What overall task are you trying to accomplish? This should be concise but complete enough to understand the purpose of the entire session.

## SUMMARY
Extract and record all of the most important context from the conversation history. Include important choices, conclusions, or strategies determined during this conversation. Include the reasoning behind key decisions. Document any rejected options and why they were not pursued.

## ARTIFACTS
What artifacts, files, or resources were created, modified, or accessed during this conversation? For file modifications, list specific file paths and briefly describe the changes made to each. This section prevents silent loss of artifact information.

## NEXT STEPS
What specific tasks remain to be completed to achieve the session intent? What should you do next?

</instructions>

The user will message you with the full message history from which you'll extract context to create a replacement. Carefully read through it all and think deeply about what information is most important to your overall goal and should be saved:

With all of this in mind, please carefully read over the entire conversation history, and extract the most important and relevant context to replace it so that you can free up space in the conversation history.
Respond ONLY with the extracted context. Do not include any additional information, or text before or after the extracted context.

<messages>
Messages to summarize:
{messages}
</messages>"""  # noqa: E501

NO_HISTORY_SUMMARY = "No previous conversation history."
TOO_LONG_SUMMARY = "Previous conversation was too long to summarize."
CANNED_SUMMARIES = frozenset({NO_HISTORY_SUMMARY, TOO_LONG_SUMMARY})
"""Valid summaries for the empty and too-long edges: no model call is made for them."""
SUMMARY_PROJECTION_PREFIX = "Here is a summary of the conversation to date:\n\n"
SUMMARY_PROJECTION_ID = "conversation-summary"

DEFAULT_MESSAGES_TO_KEEP = 20
_FALLBACK_MESSAGE_COUNT = 15
_OMITTED_MARKER = "\n...\n"
_SKILL_PATH_ARGS = ("path", "file_path", "filepath")


class ContextSize(BaseModel):
    """A trigger or retention size: a message count, a token count, or a fraction of the context window."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["messages", "tokens", "fraction"]
    value: float = Field(gt=0)

    @model_validator(mode="after")
    def _in_range(self) -> ContextSize:
        if self.type == "fraction" and self.value > 1:
            raise ValueError("a fraction must be in (0, 1]")
        if self.type != "fraction" and self.value != int(self.value):
            raise ValueError(f"{self.type} must be a whole number")
        return self


class SummarizationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    model: str | None = Field(default=None, description="model spec for summaries; unset = the run's model")
    trigger: ContextSize | list[ContextSize] | None = Field(
        default=None, description="when to summarise (a list: any of them); unset = never"
    )
    keep: ContextSize = Field(default_factory=lambda: ContextSize(type="messages", value=DEFAULT_MESSAGES_TO_KEEP))
    trim_tokens_to_summarize: int | None = Field(default=4000, ge=1, description="summary input budget; null = all")
    summary_prompt: str | None = Field(default=None, description="template with {messages}; unset = langchain's")
    preserve_recent_skill_count: int = Field(default=5, ge=0, description="recent skill reads kept verbatim; 0 = off")
    preserve_recent_skill_tokens: int = Field(default=25_000, ge=0)
    preserve_recent_skill_tokens_per_skill: int = Field(default=5_000, ge=0)
    skill_file_read_tool_names: list[str] = Field(default_factory=lambda: ["read_file", "read", "view", "cat"])
    skills_container_path: str = Field(default="/mnt/skills", description="DeerFlow's skills.container_path")

    @property
    def triggers(self) -> list[ContextSize]:
        if self.trigger is None:
            return []
        return list(self.trigger) if isinstance(self.trigger, list) else [self.trigger]


def count_tokens(messages: Sequence[BaseMessage]) -> int:
    """langchain's default counter for summarisation: approximate, scaled by the last reported usage."""
    return count_tokens_approximately(messages, use_usage_metadata_scaling=True)


def _count_unscaled(messages: Sequence[BaseMessage]) -> int:
    return count_tokens_approximately(messages)


# -- when, and where to cut ------------------------------------------------------------------------------


def should_summarize(
    messages: Sequence[BaseMessage],
    total_tokens: int,
    triggers: Sequence[ContextSize],
    *,
    max_input_tokens: int | None,
    provider: str,
) -> bool:
    for trigger in triggers:
        if trigger.type == "messages" and len(messages) >= trigger.value:
            return True
        if trigger.type == "fraction":
            if max_input_tokens is None:
                continue  # DeerFlow drops fraction clauses a model without a known context window cannot resolve
            threshold = max(int(max_input_tokens * trigger.value), 1)
        elif trigger.type == "tokens":
            threshold = int(trigger.value)
        else:
            continue
        if total_tokens >= threshold or _reported_tokens_reach(messages, threshold, provider):
            return True
    return False


def _reported_tokens_reach(messages: Sequence[BaseMessage], threshold: int, provider: str) -> bool:
    """The provider's own count on the last AIMessage, trusted only when that provider is the run's."""
    last_ai = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    if last_ai is None or last_ai.usage_metadata is None:
        return False
    reported = last_ai.usage_metadata.get("total_tokens", -1)
    return bool(reported) and reported >= threshold and last_ai.response_metadata.get("model_provider") == provider


def cutoff_index(messages: Sequence[BaseMessage], keep: ContextSize, *, max_input_tokens: int | None) -> int:
    """Where the kept tail starts (langchain's ``_determine_cutoff_index``); 0 means nothing to summarise."""
    if keep.type == "messages":
        return _find_safe_cutoff(messages, int(keep.value))
    if keep.type == "fraction" and max_input_tokens is None:
        return _find_safe_cutoff(messages, DEFAULT_MESSAGES_TO_KEEP)
    target = int(max_input_tokens * keep.value) if keep.type == "fraction" and max_input_tokens else int(keep.value)
    return _find_token_based_cutoff(messages, max(target, 1))


def _find_safe_cutoff(messages: Sequence[BaseMessage], messages_to_keep: int) -> int:
    if len(messages) <= messages_to_keep:
        return 0
    return find_safe_cutoff_point(messages, len(messages) - messages_to_keep)


def _find_token_based_cutoff(messages: Sequence[BaseMessage], target_tokens: int) -> int:
    if not messages or count_tokens(messages) <= target_tokens:
        return 0
    # The earliest start whose suffix fits the budget (suffix size only shrinks as the start moves right).
    left, right = 0, len(messages)
    candidate = len(messages)
    for _ in range(len(messages).bit_length() + 1):
        if left >= right:
            break
        mid = (left + right) // 2
        if _count_unscaled(messages[mid:]) <= target_tokens:
            candidate, right = mid, mid
        else:
            left = mid + 1
    if candidate == len(messages):
        candidate = left
    if candidate >= len(messages):
        if len(messages) == 1:
            return 0
        candidate = len(messages) - 1
    return find_safe_cutoff_point(messages, candidate)


def find_safe_cutoff_point(messages: Sequence[BaseMessage], index: int) -> int:
    """Move a cutoff that lands on ToolMessages back to the AIMessage that called them (or, when there is
    none, past the orphans), so no AI/Tool pair is split."""
    if index >= len(messages) or not isinstance(messages[index], ToolMessage):
        return index
    call_ids: set[str] = set()
    end = index
    while end < len(messages) and isinstance(message := messages[end], ToolMessage):
        if message.tool_call_id:
            call_ids.add(message.tool_call_id)
        end += 1
    for i in range(index - 1, -1, -1):
        candidate = messages[i]
        if isinstance(candidate, AIMessage) and call_ids & {call.get("id") for call in candidate.tool_calls}:
            return i
    return end


# -- what survives ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _SkillBundle:
    """The skill-file reads of one AIMessage and their ToolMessages."""

    ai_index: int
    tool_indices: tuple[int, ...]
    call_ids: frozenset[str]
    tokens: int
    key: str


def _tool_call_path(call: Mapping[str, Any]) -> str | None:
    args = call.get("args") or {}
    if not isinstance(args, dict):
        return None
    for key in _SKILL_PATH_ARGS:
        value = args.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _is_skill_read(call: Mapping[str, Any], config: SummarizationConfig) -> bool:
    if call.get("name") not in config.skill_file_read_tool_names:
        return False
    path, root = _tool_call_path(call), config.skills_container_path.rstrip("/")
    return path is not None and (path == root or path.startswith(root + "/"))


def _skill_bundles(messages: Sequence[BaseMessage], config: SummarizationConfig) -> list[_SkillBundle]:
    bundles: list[_SkillBundle] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        if not (isinstance(message, AIMessage) and message.tool_calls):
            i += 1
            continue
        paths = {
            str(call["id"]): cast(str, _tool_call_path(call))
            for call in message.tool_calls
            if call.get("id") and _is_skill_read(call, config)
        }
        end = i + 1
        while end < len(messages) and isinstance(messages[end], ToolMessage):
            end += 1
        results = [k for k in range(i + 1, end) if cast(ToolMessage, messages[k]).tool_call_id in paths]
        if results:
            matched = [cast(ToolMessage, messages[k]).tool_call_id for k in results]
            bundles.append(
                _SkillBundle(
                    ai_index=i,
                    tool_indices=tuple(results),
                    call_ids=frozenset(matched),
                    tokens=sum(count_tokens([messages[k]]) for k in results),
                    key="|".join(sorted(paths[call_id] for call_id in matched)),
                )
            )
        i = end if paths else i + 1
    return bundles


def _select_skill_bundles(bundles: list[_SkillBundle], config: SummarizationConfig) -> list[_SkillBundle]:
    """Newest first, one per skill, within the count, total-token and per-skill budgets."""
    selected: list[_SkillBundle] = []
    seen: set[str] = set()
    total = 0
    for bundle in reversed(bundles):
        if len(selected) >= config.preserve_recent_skill_count:
            break
        if bundle.key in seen or bundle.tokens > config.preserve_recent_skill_tokens_per_skill:
            continue
        if total + bundle.tokens > config.preserve_recent_skill_tokens:
            continue
        selected.append(bundle)
        total += bundle.tokens
        seen.add(bundle.key)
    return selected[::-1]


def rescue_skill_reads(
    to_summarize: list[AnyMessage], preserved: list[AnyMessage], config: SummarizationConfig
) -> tuple[list[AnyMessage], list[AnyMessage]]:
    """Keep recent skill reads verbatim: each selected AIMessage is split into a copy holding only its skill
    reads (kept, with their results) and a copy holding the rest (summarised)."""
    if not config.preserve_recent_skill_count or not config.preserve_recent_skill_tokens or not to_summarize:
        return to_summarize, preserved
    chosen = _select_skill_bundles(_skill_bundles(to_summarize, config), config)
    if not chosen:
        return to_summarize, preserved
    by_ai = {bundle.ai_index: bundle for bundle in chosen}
    tool_indices = {k for bundle in chosen for k in bundle.tool_indices}
    rescued: list[AnyMessage] = []
    remaining: list[AnyMessage] = []
    for i, message in enumerate(to_summarize):
        bundle = by_ai.get(i)
        if bundle is not None and isinstance(message, AIMessage):
            kept = [call for call in message.tool_calls if call.get("id") in bundle.call_ids]
            rest = [call for call in message.tool_calls if call.get("id") not in bundle.call_ids]
            rescued.append(clone_with_tool_calls(message, list(kept), content=""))
            if rest or message.content:
                remaining.append(clone_with_tool_calls(message, list(rest)))
        elif i in tool_indices:
            rescued.append(message)
        else:
            remaining.append(message)
    return remaining, rescued + preserved


def rescue_context(
    to_summarize: list[AnyMessage], preserved: list[AnyMessage], *, latest_user_id: str | None
) -> tuple[list[AnyMessage], list[AnyMessage]]:
    """SystemMessages, DynamicContext reminders and the current request (by exact id) are never summarised.
    Older ``__user`` copies are: they are stale requests, and keeping them contaminates later turns."""
    rescued: list[AnyMessage] = []
    remaining: list[AnyMessage] = []
    for message in to_summarize:
        if (
            isinstance(message, SystemMessage)
            or is_dynamic_context_reminder(message)
            or (latest_user_id is not None and message.id == latest_user_id)
        ):
            rescued.append(message)
        else:
            remaining.append(message)
    return remaining, rescued + preserved


@dataclass(frozen=True)
class Compaction:
    to_summarize: list[AnyMessage]
    preserved: list[AnyMessage]


def plan_compaction(
    messages: list[AnyMessage],
    summary_text: str | None,
    config: SummarizationConfig,
    *,
    max_input_tokens: int | None,
    provider: str,
) -> Compaction | None:
    """What to summarise and what to keep, or ``None`` when no trigger fires or nothing can be summarised."""
    counted: list[BaseMessage] = list(messages)
    if summary_text:
        counted.append(HumanMessage(summary_text, name=SUMMARY_MESSAGE_NAME))
    if not should_summarize(
        counted, count_tokens(counted), config.triggers, max_input_tokens=max_input_tokens, provider=provider
    ):
        return None
    cutoff = cutoff_index(messages, config.keep, max_input_tokens=max_input_tokens)
    if cutoff <= 0:
        return None
    latest_user_id = next((m.id for m in reversed(messages) if is_genuine_user_message(m)), None)
    to_summarize, preserved = rescue_skill_reads(messages[:cutoff], messages[cutoff:], config)
    to_summarize, preserved = rescue_context(to_summarize, preserved, latest_user_id=latest_user_id)
    if not to_summarize:
        return None
    return Compaction(to_summarize, preserved)


# -- the summary prompt ----------------------------------------------------------------------------------


def summary_prompt(to_summarize: list[AnyMessage], previous_summary: str | None, config: SummarizationConfig) -> str:
    """The prompt for the summary model, or one of :data:`CANNED_SUMMARIES` when no model call is needed."""
    if not to_summarize:
        return NO_HISTORY_SUMMARY
    trimmed: Sequence[BaseMessage] = _trim_for_summary(to_summarize, config.trim_tokens_to_summarize)
    strategy: Literal["first", "last"] = "first"
    if not trimmed:
        if any(isinstance(m, HumanMessage) for m in to_summarize):
            trimmed = to_summarize[-1:]  # the human anchor fell outside the token-limited tail
        else:
            # An AI/Tool-only window (the request was rescued): bound its raw text, favouring recent content.
            trimmed, strategy = to_summarize, "last"
    text = _summary_input(get_buffer_string(trimmed), previous_summary, config.trim_tokens_to_summarize, strategy)
    if text is None:
        return TOO_LONG_SUMMARY
    return (config.summary_prompt or DEFAULT_SUMMARY_PROMPT).format(messages=text).rstrip()


def _trim_for_summary(messages: list[AnyMessage], max_tokens: int | None) -> list[BaseMessage]:
    if max_tokens is None:
        return list(messages)
    try:
        return trim_messages(
            messages,
            max_tokens=max_tokens,
            token_counter=count_tokens,
            start_on="human",
            strategy="last",
            allow_partial=True,
            include_system=True,
        )
    except Exception:  # langchain falls back the same way when trimming itself fails
        return list(messages[-_FALLBACK_MESSAGE_COUNT:])


def _summary_input(
    formatted: str, previous_summary: str | None, max_tokens: int | None, strategy: Literal["first", "last"]
) -> str | None:
    """``<existing_summary>`` (trimmed from the start) and ``<new_messages>``, escaped against block breakout;
    the budget is split evenly when there is a previous summary."""
    previous = previous_summary.strip() if previous_summary else ""
    if max_tokens is not None:
        if previous:
            new_budget = max(1, max_tokens // 2)
            previous = _trim_text(previous, max(1, max_tokens - new_budget), "last")
            formatted = _trim_text(formatted, new_budget, strategy)
        else:
            formatted = _trim_text(formatted, max_tokens, strategy)
    parts: list[str] = []
    if previous:
        parts += ["<existing_summary>", html.escape(previous, quote=False), "</existing_summary>", ""]
    if formatted:
        parts += ["<new_messages>", html.escape(formatted, quote=False), "</new_messages>"]
    return "\n".join(parts) if parts else None


def _trim_text(text: str, max_tokens: int, strategy: Literal["first", "last"]) -> str:
    """The longest prefix (``first``) or suffix (``last``) of ``text`` whose message fits ``max_tokens`` — what
    ``trim_messages(..., allow_partial=True, text_splitter=list)`` keeps, found by bisection instead of
    dropping one character at a time (which takes seconds on long text, too long for a workflow task)."""
    if not text.strip():
        return ""

    def piece(length: int) -> str:
        return text[:length] if strategy == "first" else text[len(text) - length :]

    low, high = 0, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if count_tokens([HumanMessage(piece(mid))]) <= max_tokens:
            low = mid
        else:
            high = mid - 1
    kept = piece(low)
    if kept.strip():
        return kept
    # Even an empty message exceeds the budget: cap the raw text, keeping the end (last) or both ends (first).
    if strategy == "last":
        if len(text) > max_tokens > len(_OMITTED_MARKER):
            return _OMITTED_MARKER + text[-(max_tokens - len(_OMITTED_MARKER)) :]
        return text[-max_tokens:]
    return _bound_text(text, max_tokens)


def _bound_text(text: str, cap: int) -> str:
    if len(text) <= cap:
        return text
    head = cap * 2 // 3
    tail = max(0, cap - head - len(_OMITTED_MARKER))
    if cap <= len(_OMITTED_MARKER) or tail == 0:
        return text[:cap]
    return f"{text[:head]}{_OMITTED_MARKER}{text[-tail:]}"


# -- the middleware --------------------------------------------------------------------------------------


class SummarizationMiddleware(Middleware):
    def __init__(self, config: SummarizationConfig) -> None:
        self.config = config

    async def before_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        plan = plan_compaction(
            list(state.messages),
            state.summary_text,
            self.config,
            max_input_tokens=ctx.settings.model_capabilities.max_input_tokens,
            provider=ctx.model.partition(":")[0],
        )
        if plan is None:
            return None
        prompt = summary_prompt(plan.to_summarize, state.summary_text, self.config)
        summary = prompt if prompt in CANNED_SUMMARIES else await self._summarize(prompt, len(plan.to_summarize), ctx)
        if summary is None:
            return None
        ctx.emit("summarized", summarized=len(plan.to_summarize), kept=len(plan.preserved))
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *plan.preserved], "summary_text": summary}

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AIMessage:
        summary = request.state.summary_text
        if not summary:
            return await handler(request)
        messages = list(request.messages)
        at = next((i for i, m in enumerate(messages) if not isinstance(m, SystemMessage)), len(messages))
        projection = HumanMessage(
            SUMMARY_PROJECTION_PREFIX + summary,
            name=SUMMARY_MESSAGE_NAME,
            id=SUMMARY_PROJECTION_ID,
            additional_kwargs={"hide_from_ui": True},
        )
        return await handler(request.override(messages=[*messages[:at], projection, *messages[at:]]))

    async def _summarize(self, prompt: str, count: int, ctx: RunContext) -> str | None:
        """The first non-blank summary of the candidate models, or ``None`` when every candidate failed."""
        candidates = list(dict.fromkeys([self.config.model or ctx.model, ctx.model]))
        for spec in candidates:
            label = f"Summarization.before_model · summarize {count} messages"
            reply = await best_effort(call_model(ctx, spec, prompt, purpose="summarization", summary=label))
            if isinstance(reply, ActivityError):
                logger.warning("summary with %s failed: %s", spec, reply.cause or reply)
                continue
            text = message_text(reply).strip()
            if text:
                return text
            logger.warning("summary model %s returned empty text", spec)
        logger.warning("every summary model failed; the history stays as it is this turn")
        return None
