"""The agent's model turn: its request (the run's messages, system prompt and tools) through the
``wrap_model_call`` chain to the innermost handler, the model call, and the ``llm_retry`` notices the model
activity sends back while Temporal retries it.

In runs recorded before ``hartflow-breaker-in-model-call``, the answer's metadata may say when its worker last saw
the model's circuit breaker closed (``vocabulary/breaker.py``): taken out here, onto the run context, for the
replay of LLMErrorHandling's old known-closed rule. A call the breaker turned away (``breaker_gate``) gives its
call index back: the provider never saw it.

The messages go by reference (``vocabulary/transcript.py``): only those the previous request did not carry travel
in history, and the cursor that knows which is the run's (``RunFields.transcript``, carried across
continue-as-new).
"""

from __future__ import annotations

from langchain_core.messages import AIMessage, SystemMessage
from temporalio.exceptions import ActivityError

from middlewares import patches
from middlewares._activity_call import call_activity
from middlewares.base import ModelRequest
from middlewares.context import RunContext
from vocabulary.breaker import take_closed_at, turned_away_by_breaker
from vocabulary.contracts import LLM_RETRY_SIGNAL, MODEL_INVOKE, LiveTokens, LlmRetryNotice, ModelCallInput
from vocabulary.live_tokens import chain_prefix
from vocabulary.text import model_label
from vocabulary.tools import ToolCatalog
from vocabulary.transcript import MessageHasher, preamble_json
from workflows.run.dispatcher import Dispatcher
from workflows.run.fields import RunFields
from workflows.run.visibility import Visibility


class ModelCall:
    """Takes the run's agent turns (the model activity for each) and records their retries as progress events."""

    def __init__(self, ctx: RunContext, fields: RunFields, visibility: Visibility, system_prompt: str) -> None:
        self._ctx = ctx
        self._fields = fields
        self._visibility = visibility
        self._system_prompt = system_prompt
        self._hasher = MessageHasher()

    async def take_turn(self, dispatcher: Dispatcher, catalog: ToolCatalog) -> None:
        """One agent turn: the model's answer to the run's state, offered ``catalog``, appended to it."""
        ctx, fields = self._ctx, self._fields
        fields.progress.turn += 1
        fields.model_calls += 1
        self._visibility.sync_search_attributes()
        self._visibility.update_details()
        request = ModelRequest(
            messages=list(fields.state.messages),
            system_message=SystemMessage(self._system_prompt),
            tools=list(catalog.tools.values()),
            state=fields.state,
            ctx=ctx,
            model=ctx.model,
        )
        fields.apply({"messages": [await dispatcher.call_model(request, self.invoke)]}, ctx.uuid)

    async def invoke(self, request: ModelRequest) -> AIMessage:
        ctx = self._ctx
        # The lead's answer streams to API clients while it is generated, beside history (vocabulary/live_tokens.py);
        # the event says whether it does, so readers poll storage for tokens only when there will be some.
        streams = not ctx.is_subagent and ctx.model_calls.stream_tokens
        ctx.emit("model_call", turn=ctx.turn, live_tokens=streams)
        live = LiveTokens(chain_prefix(ctx.user_id, ctx.thread_id, ctx.run_id), ctx.events[-1].seq) if streams else None
        # The messages go by reference: only those the previous request did not carry travel in history; so do
        # the system message and tool schemas, in runs started since the patch (older ones send them inline).
        tools = [tool.schema() for tool in request.tools]
        by_hash = ctx.patched(patches.PREAMBLE_BY_HASH)
        preamble = preamble_json(request.system_message, tools) if by_hash else None
        transcript, cursor = self._fields.transcript.reference(ctx.thread, request.messages, self._hasher, preamble)
        call_index = ctx.next_call_index("agent")
        try:
            message = await call_activity(
                ctx,
                MODEL_INVOKE,
                ModelCallInput(
                    model=request.model,
                    messages=[],
                    transcript=transcript,
                    system_message=None if by_hash else request.system_message,
                    tools=[] if by_hash else tools,
                    purpose="agent",
                    call_index=call_index,
                    run_key=f"{ctx.workflow_id}/{ctx.run_id}",
                    retry=ctx.model_calls.retry_budget,
                    retry_signal=LLM_RETRY_SIGNAL,
                    live=live,
                    breaker_gate=request.breaker_gate,
                ),
                summary=f"model {model_label(request.model)} · turn {ctx.turn}",
                options=ctx.model_calls.options,
            )
        except ActivityError as error:
            if turned_away_by_breaker(error):
                ctx.give_back_call_index("agent", call_index)
            raise
        self._fields.transcript = cursor
        closed_at = take_closed_at(message.response_metadata)
        if closed_at is not None:
            ctx.breaker_closed_at[request.model] = closed_at
        return message

    def retrying(self, notice: LlmRetryNotice) -> None:
        """The ``llm_retry`` signal: an attempt failed and Temporal will retry it."""
        self._ctx.emit(
            "llm_retry",
            attempt=notice.attempt,
            max_attempts=notice.max_attempts,
            wait_ms=notice.wait_ms,
            reason=notice.reason,
            message=notice.message,
        )
