"""``GET /threads/{id}/token-usage``: the thread's token totals, from the usage its committed messages carry.

DeerFlow's token counter reads ``{thread_id, total_tokens, total_input_tokens, total_output_tokens, total_runs,
by_model: {NAME: {tokens, runs}}, by_caller: {lead_agent, subagent, middleware}, context_usage: {token_count,
max_context_tokens, percentage} | null}`` (``bytedance/deer-flow: frontend/src/core/threads/api.ts``
``fetchThreadTokenUsage``, ``types.ts`` ``ThreadTokenUsageResponse``; the handler is
``backend/app/gateway/routers/thread_runs.py`` ``thread_token_usage``).

The totals are what the TokenUsage middleware (``middlewares/token_usage.py``) leaves in the committed state:
each AIMessage's ``usage_metadata``, into which it adds the usage of the subagents the message dispatched (a task
result's ``subagent_token_usage``, marked ``subagent_token_usage_attributed`` once added); a subagent usage not
added yet counts on its own. ``by_caller.subagent`` is that subagent usage, ``lead_agent`` the rest;
``middleware`` (title, summarization, memory calls) is not kept in the thread and stays 0, as does ``by_model``'s
``runs`` (a message does not say which run made it). Messages a summarization removed no longer count.
``context_usage`` is the newest answer's input tokens against the served model's context window
(``run.model_capabilities.max_input_tokens``, or the ``models`` entry's ``context_window``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from vocabulary.delegation import SUBAGENT_TOKEN_USAGE_KEY, normalize_token_usage
from workers.api.deps import Context, Thread
from workers.config import HartflowConfig

router = APIRouter()

_ATTRIBUTED_KEY = "subagent_token_usage_attributed"
_FIELDS = ("input_tokens", "output_tokens", "total_tokens")


@router.get("/threads/{thread_id}/token-usage")
async def thread_token_usage(thread: Thread, context: Context) -> dict[str, Any]:
    await context.ledger.require_thread(thread)
    values, _, _ = await context.ledger.committed(thread)
    current = await context.ledger.chain(thread)
    runs = await context.ledger.runs(thread, current)
    messages = [m for m in values.get("messages") or [] if isinstance(m, dict)]
    totals = usage_totals(messages, context_window(context.config))
    return {"thread_id": thread.thread_id, **totals, "total_runs": len(runs)}


def usage_totals(messages: list[dict[str, Any]], window: int | None) -> dict[str, Any]:
    totals = dict.fromkeys(_FIELDS, 0)
    by_model: dict[str, dict[str, int]] = {}
    subagent = 0
    last_input: int | None = None
    for message in messages:
        kwargs = message.get("additional_kwargs") or {}
        if message.get("type") == "tool" and (usage := normalize_token_usage(kwargs.get(SUBAGENT_TOKEN_USAGE_KEY))):
            subagent += usage["total_tokens"]
            if not kwargs.get(_ATTRIBUTED_KEY):
                _add(totals, usage)
        elif message.get("type") == "ai" and (usage := normalize_token_usage(message.get("usage_metadata"))):
            _add(totals, usage)
            last_input = usage["input_tokens"]
            model = (message.get("response_metadata") or {}).get("model_name")
            if isinstance(model, str) and model:
                by_model.setdefault(model, {"tokens": 0, "runs": 0})["tokens"] += usage["total_tokens"]
    context_usage = None
    if last_input is not None:
        percentage = round(100 * last_input / window, 1) if window else None
        context_usage = {"token_count": last_input, "max_context_tokens": window, "percentage": percentage}
    return {
        "total_tokens": totals["total_tokens"],
        "total_input_tokens": totals["input_tokens"],
        "total_output_tokens": totals["output_tokens"],
        "by_model": by_model,
        "by_caller": {"lead_agent": totals["total_tokens"] - subagent, "subagent": subagent, "middleware": 0},
        "context_usage": context_usage,
    }


def _add(totals: dict[str, int], usage: dict[str, int]) -> None:
    for key in _FIELDS:
        totals[key] += usage[key]


def context_window(config: HartflowConfig) -> int | None:
    """The served model's context window: the default ``models`` entry's, else the shorthand's capabilities."""
    name = config.model or (config.models[0].name if config.models else None)
    entry = next((entry for entry in config.models if entry.name == name), None)
    if entry is not None:
        return entry.context_window
    return config.run.model_capabilities.max_input_tokens
