"""SubagentLimit: at most ``max_concurrent`` subagents per model response and ``max_total`` per run (DeerFlow's
``SubagentLimitMiddleware``), plus the ``task`` tool itself.

Present in the lead chain exactly when ``run.subagent_enabled`` is on (DeerFlow's ``subagent_enabled`` runtime
option), right before LoopDetection; subagents never have it, so they can neither see nor call ``task``.

Hooks
* ``tools`` — contributes the ``task`` tool (``vocabulary/delegation.py``): the limit and the tool come and go
  together, as in DeerFlow. The run executes ``task`` as a child workflow (``Delegation`` in
  ``workflows/run/delegate.py``).
* ``after_model`` — counts this run's prior delegations (distinct ledger ids whose ``run_id`` is this run's) and
  allows ``min(max_concurrent, max(0, max_total - prior))`` task calls in the new AIMessage; excess **task**
  calls are dropped (other tool calls kept, the provider's raw copy synced, ``finish_reason`` ``tool_calls`` →
  ``stop`` when no call is left). When the run's total is used up, ``ctx.stop_reason`` becomes
  ``subagent_limit_capped`` and the content gets DeerFlow's ``[SUBAGENT LIMIT REACHED]`` notice.
  The ledger (``delegations``) is DurableContext's: it records the calls this hook leaves, right after it (the
  reverse ``after_model`` order), so the current response's calls are never counted as "prior".

Writes: thread state (the replaced AIMessage, same id), the run's stop reason and a
``subagent_limit`` progress event (the dropped call ids).

Parts: the ``task`` tool and the subagent status contract in ``vocabulary/delegation.py``; the ledger
(``middlewares/durable_context.py``); the
child workflow that runs a ``task`` call in ``workflows/run/delegate.py`` (``Delegation``) and
``workflows/run/delegation.py``, the subagent run itself in ``workflows/run/subagent.py`` and
``workflows/run/profile.py``. Helpers: ``middlewares/_tool_calls.py``. Tests: ``tests/test_subagent_limit.py``,
``tests/test_subagents.py``.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage

from middlewares._logging import hook_logger
from middlewares._tool_calls import append_text, clone_with_tool_calls
from middlewares.base import Middleware
from middlewares.context import RunContext
from vocabulary.delegation import TASK_TOOL, TASK_TOOL_NAME, SubagentsSettings
from vocabulary.state import StateUpdate, ThreadState
from vocabulary.tools import ToolSpec

logger = hook_logger(__name__)

STOP_SUBAGENT_LIMIT_CAPPED = "subagent_limit_capped"
LIMIT_REACHED_NOTICE = (
    "[SUBAGENT LIMIT REACHED] The subagent delegation limit for this run has been reached. Continue using the "
    "subagent results already collected, execute remaining simple work directly, or summarize the remaining work "
    "instead of launching more subagents."
)


def count_prior_delegations(delegations: list[dict[str, object]], run_id: str | None) -> int:
    """Distinct ledger ids of this run (every entry when the run id is unknown, as DeerFlow counts)."""
    ids = {
        str(entry["id"])
        for entry in delegations
        if entry.get("id") and (run_id is None or entry.get("run_id") == run_id)
    }
    return len(ids)


class SubagentLimitMiddleware(Middleware):
    def __init__(self, config: SubagentsSettings | None = None) -> None:
        self.config = config or SubagentsSettings()

    @property
    def max_concurrent(self) -> int:
        return self.config.max_concurrent

    @property
    def max_total(self) -> int:
        return self.config.max_total

    def tools(self) -> list[ToolSpec]:
        return [TASK_TOOL]

    async def after_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        truncated = self._truncate(state, ctx)
        return {"messages": [truncated]} if truncated is not None else None

    def _truncate(self, state: ThreadState, ctx: RunContext) -> AIMessage | None:
        last = state.messages[-1] if state.messages else None
        if not isinstance(last, AIMessage) or not last.tool_calls:
            return None
        task_indices = [i for i, call in enumerate(last.tool_calls) if call.get("name") == TASK_TOOL_NAME]
        if not task_indices:
            return None
        prior = count_prior_delegations(state.delegations, ctx.run_id)
        remaining_total = max(0, self.max_total - prior)
        allowed = min(self.max_concurrent, remaining_total)
        if len(task_indices) <= allowed:
            return None
        dropped = set(task_indices[allowed:])
        kept = [call for i, call in enumerate(last.tool_calls) if i not in dropped]
        logger.warning(
            "Truncated %d excess task call(s) (max_concurrent=%d, max_total=%d, prior=%d)",
            len(dropped),
            self.max_concurrent,
            self.max_total,
            prior,
        )
        dropped_ids = [str(last.tool_calls[i].get("id")) for i in sorted(dropped)]
        if remaining_total == 0:
            ctx.stop(STOP_SUBAGENT_LIMIT_CAPPED, "subagent_limit", dropped=dropped_ids, capped=True)
            return clone_with_tool_calls(last, kept, content=append_text(last.content, LIMIT_REACHED_NOTICE))
        ctx.emit("subagent_limit", dropped=dropped_ids, capped=False)
        return clone_with_tool_calls(last, kept)
