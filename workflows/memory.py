"""The memory workflow: one per user (``hartflow-memory-{user_id}``), DeerFlow's debounced memory queue made durable.

    enqueue signal (from the Memory middleware's activity, signal-with-start)
        → the thread's pending conversation is replaced by the newer one (one update per thread)
    quiet for ``debounce_seconds`` since the last enqueue (a workflow timer, reset by every enqueue)
        → per pending thread: memory.read → model.invoke (purpose "memory") → memory.save
    edit update (``hartflow memory``, the Settings page) → memory.read → the user's change → memory.save,
        answered with the saved document
    idle and the history is long → continue-as-new, carrying what is still pending

The workflow is the memory's only writer, and one lock orders its writes: an extraction reads the memory again
after its model call and folds its update into that, so an edit made meanwhile is kept, and an edit waits for
an extraction's save (never for its model call).

Runs never wait for this workflow: they only enqueue. A failed extraction is logged and dropped, as in DeerFlow:
the thread's next run queues its whole conversation again.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

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
from vocabulary.contracts.memory import MEMORY_EDIT_UPDATE, MemoryDocument, MemoryEdit
from vocabulary.messages import message_text
from workflows.memory_edit import MemoryEditError, apply_edit
from workflows.memory_update import MemoryUpdateError, apply_update, parse_update, update_prompt

SEEN_IDS_KEPT = 100
"""Enough to recognise a retried enqueue; a run's enqueue retries within seconds."""

_STORE_TIMEOUT = timedelta(seconds=30)
_STORE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))
"""Storage outages are waited out, up to ``_STORE_PATIENCE``: giving up on the save would throw away the
extraction's model call. A wrong storage configuration still fails at once (the activity raises it
non-retryable)."""
_STORE_PATIENCE = timedelta(hours=1)
_EDIT_PATIENCE = timedelta(seconds=60)
"""A user waits for an edit: a storage outage fails it after this long instead of holding the page."""
REREAD_PATCH = "memory-reread-before-save"
"""Extractions recorded before edits existed saved what they had read before the model call."""
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
        self._writing = asyncio.Lock()
        """Held from a write's memory.read to its memory.save: extractions and edits never interleave."""
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

    @workflow.update(name=MEMORY_EDIT_UPDATE, description="Apply a user's change; returns the saved document.")
    async def edit(self, edit: MemoryEdit) -> MemoryDocument:
        async with self._writing:
            document = await self._read(_EDIT_PATIENCE)
            try:
                memory = apply_edit(document.data, edit, now=self._now(), new_id=self._short_id)
            except MemoryEditError as error:
                raise ApplicationError(str(error), type=error.kind, non_retryable=True) from None
            await self._save(memory, _EDIT_PATIENCE)
            return MemoryDocument(memory)

    @workflow.query(name="status", description="Threads waiting for extraction, extractions done, last error.")
    def status(self) -> MemoryStatus:
        return MemoryStatus(list(self._pending), self._extractions, self._last_error)

    @workflow.run
    async def run(self, input: MemoryWorkflowInput) -> None:
        while True:
            # Edits alone grow the history too: an idle workflow continues as new when Temporal suggests it.
            await workflow.wait_condition(lambda: bool(self._pending) or workflow.info().is_continue_as_new_suggested())
            if self._pending:
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
            document = await self._read(_STORE_PATIENCE)
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
            async with self._writing:
                if workflow.patched(REREAD_PATCH):
                    document = await self._read(_STORE_PATIENCE)  # an edit may have saved during the model call
                memory = apply_update(
                    document.data,
                    update,
                    now=self._now(),
                    new_id=self._short_id,
                    source=item.thread_id,
                    settings=item.settings,
                )
                await self._save(memory, _STORE_PATIENCE)
        except (ActivityError, MemoryUpdateError) as error:
            if is_cancelled_exception(error):
                raise
            self._last_error = f"thread {item.thread_id}: {error.cause if isinstance(error, ActivityError) else error}"
            workflow.logger.warning("memory update failed for %s", self._last_error)
            return
        self._extractions += 1
        self._last_error = None

    async def _read(self, patience: timedelta) -> MemoryDocument:
        document: MemoryDocument = await workflow.execute_activity(
            MEMORY_READ,
            MemoryReadInput(self._user_id),
            result_type=MEMORY_READ.output,
            summary=f"Memory · read memory of {self._user_id}",
            start_to_close_timeout=_STORE_TIMEOUT,
            schedule_to_close_timeout=patience,
            retry_policy=_STORE_RETRY,
        )
        return document

    async def _save(self, memory: dict[str, object], patience: timedelta) -> None:
        await workflow.execute_activity(
            MEMORY_SAVE,
            MemorySaveInput(self._user_id, memory),
            result_type=MEMORY_SAVE.output,
            summary=f"Memory · save memory of {self._user_id}",
            start_to_close_timeout=_STORE_TIMEOUT,
            schedule_to_close_timeout=patience,
            retry_policy=_STORE_RETRY,
        )

    @staticmethod
    def _now() -> str:
        return workflow.now().isoformat().replace("+00:00", "Z")

    @staticmethod
    def _short_id() -> str:
        return workflow.uuid4().hex[:8]

    def _enqueued_since(self, count: int) -> bool:
        return self._enqueued != count

    def _set_details(self) -> None:
        pending = ", ".join(self._pending) or "none"
        lines = [f"**Pending threads:** {pending}", f"**Extractions:** {self._extractions}"]
        if self._last_error:
            lines.append(f"**Last error:** {self._last_error}")
        workflow.set_current_details("\n\n".join(lines))
