"""The memory workflow: one per user (``hartflow-memory-{user_id}``), DeerFlow's debounced memory queue made durable.

    enqueue signal (from the Memory middleware's activity, signal-with-start)
        → the thread's pending conversation is replaced by the newer one (one update per thread)
    quiet for ``debounce_seconds`` since the last enqueue (a workflow timer, reset by every enqueue)
        → per pending thread: memory.read → model.invoke (purpose "memory") → memory.save
    idle and the history is long → continue-as-new, carrying what is still pending

Runs never wait for this workflow: they only enqueue. A failed extraction is logged and dropped, as in DeerFlow:
the thread's next run queues its whole conversation again.
"""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, is_cancelled_exception

from middlewares._model_call import prompt_request
from vocabulary.contracts import (
    MEMORY_ENQUEUE_SIGNAL,
    MEMORY_READ,
    MEMORY_SAVE,
    MEMORY_WORKFLOW,
    MODEL_INVOKE,
    MemoryItem,
    MemoryReadInput,
    MemorySaveInput,
    MemoryWorkflowInput,
)
from vocabulary.messages import message_text
from workflows.memory_update import MemoryUpdateError, apply_update, parse_update, update_prompt

SEEN_IDS_KEPT = 100
"""Enough to recognise a retried enqueue; a run's enqueue retries within seconds."""

_STORE_TIMEOUT = timedelta(seconds=30)
_STORE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))
"""Storage outages are waited out, up to ``_STORE_PATIENCE``: giving up on the save would throw away the
extraction's model call. A wrong storage configuration still fails at once (the activity raises it
non-retryable)."""
_STORE_PATIENCE = timedelta(hours=1)
_MODEL_RETRY = RetryPolicy(initial_interval=timedelta(seconds=2), backoff_coefficient=2.0, maximum_attempts=3)


@dataclass
class MemoryStatus:
    pending_threads: list[str]
    extractions: int
    last_error: str | None


@workflow.defn(name=MEMORY_WORKFLOW)
class MemoryWorkflow:
    @workflow.init
    def __init__(self, input: MemoryWorkflowInput) -> None:
        self._user_id = input.user_id
        self._pending: dict[str, MemoryItem] = {}
        self._seen: deque[str] = deque(input.seen, maxlen=SEEN_IDS_KEPT)
        self._calls = input.model_calls
        self._extractions = input.extractions
        self._enqueued = 0
        self._last_error: str | None = None
        for item in input.pending:
            self._accept(item)

    @workflow.signal(name=MEMORY_ENQUEUE_SIGNAL, description="Queue a run's conversation for memory extraction.")
    def enqueue(self, item: MemoryItem) -> None:
        if item.id in self._seen:
            return  # the enqueue activity retried after its signal landed
        self._seen.append(item.id)
        self._accept(item)

    def _accept(self, item: MemoryItem) -> None:
        # The newest conversation of a thread contains the older ones: it replaces them (DeerFlow's queue key).
        self._pending.pop(item.thread_id, None)
        self._pending[item.thread_id] = item
        self._enqueued += 1
        self._set_details()

    @workflow.query(name="status", description="Threads waiting for extraction, extractions done, last error.")
    def status(self) -> MemoryStatus:
        return MemoryStatus(list(self._pending), self._extractions, self._last_error)

    @workflow.run
    async def run(self, input: MemoryWorkflowInput) -> None:
        while True:
            await workflow.wait_condition(lambda: bool(self._pending))
            await self._debounce()
            batch = list(self._pending.values())
            self._pending.clear()
            for item in batch:
                await self._extract(item)
            self._set_details()
            if not self._pending and workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(
                    MemoryWorkflowInput(
                        user_id=self._user_id,
                        pending=list(self._pending.values()),
                        model_calls=self._calls,
                        extractions=self._extractions,
                        seen=list(self._seen),
                    )
                )

    async def _debounce(self) -> None:
        """Return once no conversation was queued for the latest item's ``debounce_seconds``."""
        while True:
            latest = next(reversed(self._pending.values()))
            try:
                await workflow.wait_condition(
                    functools.partial(self._enqueued_since, self._enqueued),
                    timeout=timedelta(seconds=latest.settings.debounce_seconds),
                    timeout_summary="Memory · debounce",
                )
            except TimeoutError:
                return

    async def _extract(self, item: MemoryItem) -> None:
        try:
            document = await workflow.execute_activity(
                MEMORY_READ,
                MemoryReadInput(self._user_id),
                result_type=MEMORY_READ.output,
                summary=f"Memory · read memory of {self._user_id}",
                start_to_close_timeout=_STORE_TIMEOUT,
                schedule_to_close_timeout=_STORE_PATIENCE,
                retry_policy=_STORE_RETRY,
            )
            call_index = self._calls
            self._calls += 1
            reply = await workflow.execute_activity(
                MODEL_INVOKE,
                prompt_request(
                    item.settings.model,
                    update_prompt(document.data, item.messages),
                    purpose="memory",
                    call_index=call_index,
                    run_key=workflow.info().workflow_id,
                ),
                result_type=MODEL_INVOKE.output,
                summary=f"Memory · extract facts from thread {item.thread_id}",
                start_to_close_timeout=timedelta(minutes=10),
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=_MODEL_RETRY,
            )
            update = parse_update(message_text(reply))
            memory = apply_update(
                document.data,
                update,
                now=workflow.now().isoformat().replace("+00:00", "Z"),
                new_id=lambda: workflow.uuid4().hex[:8],
                source=item.thread_id,
                settings=item.settings,
            )
            await workflow.execute_activity(
                MEMORY_SAVE,
                MemorySaveInput(self._user_id, memory),
                result_type=MEMORY_SAVE.output,
                summary=f"Memory · save memory of {self._user_id}",
                start_to_close_timeout=_STORE_TIMEOUT,
                schedule_to_close_timeout=_STORE_PATIENCE,
                retry_policy=_STORE_RETRY,
            )
        except (ActivityError, MemoryUpdateError) as error:
            if is_cancelled_exception(error):
                raise
            self._last_error = f"thread {item.thread_id}: {error.cause if isinstance(error, ActivityError) else error}"
            workflow.logger.warning("memory update failed for %s", self._last_error)
            return
        self._extractions += 1
        self._last_error = None

    def _enqueued_since(self, count: int) -> bool:
        return self._enqueued != count

    def _set_details(self) -> None:
        pending = ", ".join(self._pending) or "none"
        lines = [f"**Pending threads:** {pending}", f"**Extractions:** {self._extractions}"]
        if self._last_error:
            lines.append(f"**Last error:** {self._last_error}")
        workflow.set_current_details("\n\n".join(lines))
