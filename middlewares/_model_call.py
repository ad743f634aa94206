"""Auxiliary model calls (title, summarisation, memory extraction): one prompt in, one AIMessage out.

The agent's own call sends its message list by reference (``vocabulary/transcript.py``); these calls send one
HumanMessage built from a bounded prompt, inline — past ``storage.payload_threshold_bytes`` the claim check
moves it out of history like any other large payload. Building the request here keeps the three call sites
identical in shape, so their activity summaries and options stay exactly what replayed histories recorded.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage

from middlewares._activity_call import call_activity
from middlewares.context import RunContext
from vocabulary.contracts import MODEL_INVOKE, LlmRetryBudget, ModelCallInput, ModelPurpose


def prompt_request(
    model: str,
    prompt: str,
    *,
    purpose: ModelPurpose,
    call_index: int,
    run_key: str,
    retry: LlmRetryBudget | None = None,
) -> ModelCallInput:
    """The ``model.invoke`` input for a single-prompt call."""
    return ModelCallInput(
        model=model,
        messages=[HumanMessage(prompt)],
        purpose=purpose,
        call_index=call_index,
        run_key=run_key,
        retry=retry or LlmRetryBudget(),
    )


async def call_model(ctx: RunContext, model: str, prompt: str, *, purpose: ModelPurpose, summary: str) -> AIMessage:
    """Ask ``model`` one prompt from a hook, with the run's model-call timeouts and LLM retry budget."""
    request = prompt_request(
        model,
        prompt,
        purpose=purpose,
        call_index=ctx.next_call_index(purpose),
        run_key=f"{ctx.workflow_id}/{ctx.run_id}",
        retry=ctx.model_calls.retry_budget,
    )
    return await call_activity(ctx, MODEL_INVOKE, request, summary=summary, options=ctx.model_calls.options)
