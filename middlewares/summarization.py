"""Summarization: compact old history into ``summary_text`` when the conversation grows too long
(DeerFlow's ``DeerFlowSummarizationMiddleware`` over langchain's ``SummarizationMiddleware``).

Hook
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

``summary_text`` reaches the model through DurableContext (``middlewares/durable_context.py``), which projects it
into every request as DeerFlow does; this middleware only writes it.

Everything but the summary call is pure and deterministic, so it runs in the workflow: the compaction plan is in
``middlewares/_compaction.py``, the summary prompt in ``middlewares/_summary_prompt.py``.

Parts: the config ``middlewares/_summarization_config.py``, the plan ``middlewares/_compaction.py`` (with
``middlewares/_skill_reads.py``), the prompt ``middlewares/_summary_prompt.py`` and the call
``middlewares/_model_call.py`` (``vocabulary/contracts/model.py`` ``MODEL_INVOKE``, ``activities/model.py``). Tests:
``tests/test_summarization.py``, ``tests/test_compaction.py``, ``tests/test_summary_prompt.py``.
"""

from __future__ import annotations

from langchain_core.messages import RemoveMessage
from temporalio.exceptions import ActivityError

from middlewares._compaction import plan_compaction
from middlewares._logging import hook_logger
from middlewares._model_call import call_model

# The config types live apart, for the plan and the prompt to read; callers import them from the middleware.
from middlewares._summarization_config import ContextSize as ContextSize
from middlewares._summarization_config import SummarizationConfig as SummarizationConfig
from middlewares._summary_prompt import CANNED_SUMMARIES, summary_prompt
from middlewares.base import Middleware
from middlewares.context import RunContext, best_effort
from vocabulary.messages import REMOVE_ALL_MESSAGES, message_text
from vocabulary.state import StateUpdate, ThreadState

logger = hook_logger(__name__)


# -- the middleware --------------------------------------------------------------------------------------


class SummarizationMiddleware(Middleware):
    def __init__(self, config: SummarizationConfig) -> None:
        self.config = config

    async def before_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        plan = plan_compaction(
            list(state.messages),
            state.summary_text,
            self.config,
            max_input_tokens=ctx.capabilities.max_input_tokens,
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
