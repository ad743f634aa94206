"""Memory: hand the conversation to the user's memory queue when the run ends (DeerFlow's ``MemoryMiddleware``).

Hook
* ``after_agent`` — when ``memory.enabled``: the thread's user turns and final answers (hidden framework
  messages and upload blocks dropped, Human Input replies kept: DeerFlow's ``filter_messages_for_memory``) go
  to the ``memory.enqueue`` activity, which signals-with-start the user's memory workflow
  (``workflows/memory.py``, id ``hartflow-memory-{user_id}``). That workflow debounces, extracts facts with a
  model and stores them where DynamicContext reads them. **Side effect** only; the run waits for the enqueue
  (one short local activity), never for the extraction. The run calls after_agent in its ``finally`` path, so a
  failed or cancelled run is remembered too, as DeerFlow's next turn would re-feed it.

Why an activity and not a signal from the run: a signal needs the memory workflow to be running already, and a
workflow cannot signal-with-start; the activity can, and Temporal guarantees one memory workflow per user.

Parts: the contract ``vocabulary/contracts/memory.py`` (``MEMORY_ENQUEUE``) and its activity
``activities/memory_queue.py``; the per-user memory workflow ``workflows/memory.py`` (its pure updater:
``workflows/memory_update.py``), which reads and saves the memory through ``activities/memory_store.py``
(``MEMORY_READ``, ``MEMORY_SAVE``) where DynamicContext loads it. Helpers: ``middlewares/_messages.py``. Tests:
``tests/test_memory.py``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from pydantic import BaseModel, ConfigDict, Field
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from middlewares._activity_call import call_activity
from middlewares._logging import hook_logger
from middlewares._messages import HIDE_FROM_UI_KEY, is_human_input_response
from middlewares.base import Middleware
from middlewares.context import ActivityOptions, RunContext, best_effort
from vocabulary.contracts import MEMORY_ENQUEUE, MemoryEnqueueInput, MemoryItem, MemoryUpdateSettings
from vocabulary.state import StateUpdate, ThreadState

logger = hook_logger(__name__)

_UPLOAD_BLOCK = re.compile(r"<(?P<tag>uploaded_files|current_uploads)>[\s\S]*?</(?P=tag)>\n*", re.IGNORECASE)
_ENQUEUE_OPTIONS = ActivityOptions(
    start_to_close=timedelta(seconds=30),
    retry=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=5),
    local=True,  # one short, idempotent RPC at the end of every run: a marker, not six history events
)


class MemoryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    model: str | None = Field(default=None, description="model spec for fact extraction; unset = the run's model")
    debounce_seconds: float = Field(default=30, gt=0, description="quiet time after the last run before extracting")
    fact_confidence_threshold: float = Field(default=0.7, ge=0, le=1, description="facts below it are not stored")
    max_facts: int = Field(default=100, ge=1, description="most confident facts kept")


def _text(message: BaseMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    parts = [p if isinstance(p, str) else p.get("text") for p in message.content]
    return " ".join(p for p in parts if isinstance(p, str))


def filter_messages_for_memory(messages: Sequence[BaseMessage]) -> list[AnyMessage]:
    """User inputs and final answers only. An upload-only message and the answer to it are dropped together."""
    kept: list[AnyMessage] = []
    skip_next_answer = False
    for message in messages:
        if isinstance(message, HumanMessage):
            kwargs = message.additional_kwargs
            if kwargs.get(HIDE_FROM_UI_KEY) and not is_human_input_response(kwargs):
                continue  # framework notes (memory, reminders, images) must not feed memory back into itself
            text = _text(message)
            if "<uploaded_files>" in text.lower() or "<current_uploads>" in text.lower():
                stripped = _UPLOAD_BLOCK.sub("", text).strip()
                if not stripped:
                    skip_next_answer = True
                    continue
                message = message.model_copy(update={"content": stripped})
            kept.append(message)
            skip_next_answer = False
        elif isinstance(message, AIMessage) and not message.tool_calls:
            if skip_next_answer:
                skip_next_answer = False
                continue
            kept.append(message)
    return kept


class MemoryMiddleware(Middleware):
    def __init__(self, config: MemoryConfig | None = None) -> None:
        self.config = config or MemoryConfig()

    async def after_agent(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        if not self.config.enabled or not state.messages:
            return None
        conversation = filter_messages_for_memory(state.messages)
        if not any(isinstance(m, HumanMessage) for m in conversation) or not any(
            isinstance(m, AIMessage) for m in conversation
        ):
            return None
        settings = MemoryUpdateSettings(
            model=self.config.model or ctx.model,
            debounce_seconds=self.config.debounce_seconds,
            fact_confidence_threshold=self.config.fact_confidence_threshold,
            max_facts=self.config.max_facts,
        )
        item = MemoryItem(f"{ctx.workflow_id}/{ctx.run_id}", ctx.thread_id, conversation, settings)
        queued = await best_effort(
            call_activity(
                ctx,
                MEMORY_ENQUEUE,
                MemoryEnqueueInput(ctx.user_id, item),
                summary=f"Memory.after_agent · enqueue {len(conversation)} messages",
                options=_ENQUEUE_OPTIONS,
            )
        )
        if isinstance(queued, ActivityError):
            # Memory is best-effort, as in DeerFlow: the next run of the thread queues the whole conversation again.
            logger.warning("memory not queued for thread %s: %s", ctx.thread_id, queued.cause or queued)
        return None
