"""The ``model.invoke`` activity: one chat-model request per activity attempt.

Temporal owns retries: the activity makes exactly one provider request, and failures leave as
``ApplicationError`` whose ``non_retryable`` / ``next_retry_delay`` tell the retry policy what to do
(``activities/llm_errors.py`` decides, per attempt). Before an attempt that will be retried, the activity
signals the calling workflow (``ModelCallInput.retry_signal``) so the run shows DeerFlow's ``llm_retry`` event;
that signal is best-effort: failing to send it never fails the call.
A request by reference (``input.transcript``) is read first; the message bodies it brings are stored beside the
model call, and the answer returns only once they are stored, since the run's next request names them
(``activities/transcripts.py``). The result is recorded in workflow history, so the workflow sees the same
``AIMessage`` on replay. When the call asks for live tokens (``ModelCallInput.live``) and the model streams, the
answer is read with ``astream`` and published in batches while it is generated (``activities/live_tokens.py``); the
result is still the complete message, under an id every attempt shares. A gated call
(``ModelCallInput.breaker_gate``) first asks this worker's view of the model's circuit breaker and, unless it is
closed with no failures, fails with ``NOT_CLOSED_ERROR`` without calling the provider (the run then checks the
breaker itself: ``middlewares/llm_error_handling.py``).

``input.model`` is a name from the worker's ``models:`` list (built here, its ``$VAR`` secrets read from this
process's environment, so they never enter history) or a ``scripted:`` / ``openai:`` shorthand. Error text
that would carry a resolved secret is scrubbed before it leaves the activity.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.contract import implements
from activities.heartbeat import heartbeats
from activities.live_tokens import TokenBatcher, drop_folded_calls, stream_answer
from activities.llm_errors import retry_message, to_application_error
from activities.models import CallCoordinates, InvalidModelSpecError, build_chat_model
from activities.models.catalog import ModelCatalog, ModelConfigError, ModelEntry, redact
from activities.models.script import ScriptExhaustedError
from activities.models.script_file import ScriptError
from activities.storage import ObjectStore, wait_out_outage
from activities.tracing import model_span, record_usage
from activities.transcripts import Preamble, TranscriptError, TranscriptStore
from vocabulary.breaker import NOT_CLOSED_ERROR
from vocabulary.contracts import MODEL_INVOKE, LlmRetryNotice, ModelCallInput

__all__ = ["MAX_HEARTBEAT_INTERVAL", "ModelActivities"]

MAX_HEARTBEAT_INTERVAL = 5.0
"""Seconds between heartbeats while waiting on the provider (less when the heartbeat timeout is short)."""

_SIGNAL_TIMEOUT = timedelta(seconds=5)


def _heartbeat_interval(info: activity.Info) -> float:
    if info.heartbeat_timeout is None:
        return MAX_HEARTBEAT_INTERVAL
    return min(MAX_HEARTBEAT_INTERVAL, info.heartbeat_timeout.total_seconds() / 3)


class ModelActivities:
    def __init__(
        self,
        store: ObjectStore | None = None,
        models: Sequence[ModelEntry] = (),
        environ: Mapping[str, str] | None = None,
        stream_tokens: bool = True,
        breaker_closed: Callable[[str], Awaitable[bool]] | None = None,
    ) -> None:
        """``store``: where the threads' message blobs live; requests that carry a transcript reference need it;
        live tokens are published there too. ``models``: the worker's ``models:`` list, built with ``$VAR`` values
        from ``environ``. ``stream_tokens``: publish answers while they are generated (when the call asks).
        ``breaker_closed``: this process's view of a model's breaker, for gated calls
        (``LlmBreakerActivities.closed_without_failures``); without it, gated calls go ahead."""
        self._breaker_closed = breaker_closed
        self._transcripts = TranscriptStore(store) if store is not None else None
        self._store = store
        self._stream_tokens = stream_tokens
        self._catalog = ModelCatalog(models, environ)

    @implements(MODEL_INVOKE)
    async def invoke(self, input: ModelCallInput) -> AIMessage:
        """Call the model named by ``input.model`` once; the returned message always has an ``id``."""
        info = activity.info()
        # One heartbeat for the whole call: reading the request (a first request on a long thread may read
        # thousands of blobs), the provider's answer, and storing what the request brought.
        with heartbeats(_heartbeat_interval(info)):
            if input.breaker_gate and self._breaker_closed is not None and not await self._breaker_closed(input.model):
                raise ApplicationError(
                    f"the circuit breaker of {input.model} is not closed: the run checks it before calling",
                    type=NOT_CLOSED_ERROR,
                    non_retryable=True,
                )
            with model_span(input.model, purpose=input.purpose, attempt=info.attempt) as span:
                message = await self._invoke(input, info)
                record_usage(span, message.usage_metadata)
        return message

    async def _invoke(self, input: ModelCallInput, info: activity.Info) -> AIMessage:
        call = CallCoordinates(purpose=input.purpose, call_index=input.call_index, attempt=info.attempt)
        messages, (system_message, tools), storing = await self._request(input)
        if system_message is not None:
            messages.insert(0, system_message)
        secrets: tuple[str, ...] = ()
        try:
            if input.model in self._catalog:
                built = self._catalog.build(input.model)
                model, secrets = built.model, built.secrets
            else:
                model = build_chat_model(input.model, call)
            runnable: Runnable[LanguageModelInput, AIMessage] = model.bind_tools(tools) if tools else model
            streamed = self._live(input, info, model)
            answer = runnable.ainvoke(messages) if streamed is None else stream_answer(runnable, messages, streamed)
            message = await answer
        except (ScriptExhaustedError, ScriptError, InvalidModelSpecError, ModelConfigError) as exc:
            raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from exc
        except Exception as exc:
            error = to_application_error(
                exc,
                attempt=info.attempt,
                budget=input.retry,
                seed=f"{input.run_key}/{input.purpose}/{input.call_index}",
            )
            if input.retry_signal is not None and not error.non_retryable:
                await _notify_retry(info, input.retry_signal, error)
            if _mentions(exc, secrets):
                # The cause would travel into history with its message: send the scrubbed error alone.
                raise _redacted(error, secrets) from None
            raise error from exc
        if streamed is not None:
            message.id = live_message_id(info)  # the id its published chunks carry, the same on every attempt
        elif message.id is None:
            # Random is fine: the activity result is recorded in history and replayed verbatim.
            message.id = f"run-{uuid.uuid4()}"
        if storing is not None:
            # The next request names what this one stored: the answer waits until it is in the store.
            await storing
        return message

    def _live(self, input: ModelCallInput, info: activity.Info, model: BaseChatModel) -> TokenBatcher | None:
        """The batcher publishing this call's tokens: when the workflow asked for them, this worker has a store
        and the model can stream (a model without its own ``_astream`` answers in one piece: ``ainvoke``)."""
        if input.live is None or self._store is None or not self._stream_tokens:
            return None
        if type(model)._astream is BaseChatModel._astream:
            return None
        store, live = self._store, input.live
        _beside_the_call(functools.partial(drop_folded_calls, store, live))
        return TokenBatcher(store, live, info.attempt, live_message_id(info))

    async def _request(self, input: ModelCallInput) -> tuple[list[BaseMessage], Preamble, asyncio.Future[None] | None]:
        """The request's messages, system message and tools: inline, or resolved from the thread's blobs (a
        storage outage is retried; a reference that does not add up is not). With a reference, also the future
        storing the blobs it brings: it runs beside the model call (on S3 a turn's writes are round trips)."""
        if input.transcript is None:
            return list(input.messages), (input.system_message, input.tools), None
        if self._transcripts is None:
            raise ApplicationError("this worker has no blob store for transcript references", non_retryable=True)
        transcripts, ref = self._transcripts, input.transcript

        def resolve() -> tuple[list[BaseMessage], Preamble]:
            messages = transcripts.messages(ref)
            preamble = transcripts.preamble(ref) if ref.preamble is not None else (input.system_message, input.tools)
            return messages, preamble

        try:
            # The usual turn's request is resolved from what this process holds; otherwise it reads the store,
            # on a thread, an outage waited out there (a failed attempt would spend the model's retry budget).
            resolved = transcripts.from_memory(ref, resolve)
            if resolved is None:
                resolved = await asyncio.to_thread(wait_out_outage, resolve, what="reading the request's messages")
            messages, preamble = resolved
        except TranscriptError as exc:
            raise ApplicationError(str(exc), type="TranscriptError", non_retryable=True) from exc
        store = functools.partial(transcripts.store, ref)
        stored = _beside_the_call(functools.partial(wait_out_outage, store, what="storing the request's messages"))
        return messages, preamble, stored


def _beside_the_call(work: Callable[[], None]) -> asyncio.Future[None]:
    """``work`` on a thread (in this context, as ``to_thread`` runs it) while the call goes on. Its failure is
    raised to whoever awaits the future, and dropped when nobody does (a call that failed first). An executor's
    future, not a task around ``to_thread``: the same thread, two event-loop steps fewer."""
    future = asyncio.get_running_loop().run_in_executor(None, contextvars.copy_context().run, work)
    future.add_done_callback(lambda done: done.cancelled() or done.exception())
    return future


def live_message_id(info: activity.Info) -> str:
    """The id of a streamed call's message: derived from the activity, so every attempt streams under it."""
    return f"run-{uuid.uuid5(uuid.NAMESPACE_URL, f'{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}')}"


def _mentions(exc: BaseException, secrets: Sequence[str]) -> bool:
    """Whether ``exc`` or an exception it was raised from (its cause chain travels with the failure) quotes a
    secret."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if any(secret and secret in str(current) for secret in secrets):
            return True
        current = current.__cause__ or current.__context__
    return False


def _redacted(error: ApplicationError, secrets: Sequence[str]) -> ApplicationError:
    return ApplicationError(
        redact(error.message, secrets),
        *error.details,
        type=error.type,
        non_retryable=error.non_retryable,
        next_retry_delay=error.next_retry_delay,
    )


async def _notify_retry(info: activity.Info, signal: str, error: ApplicationError) -> None:
    """Tell the calling workflow this attempt failed and will be retried, as DeerFlow's ``llm_retry`` event."""
    details = error.details[0]
    notice = LlmRetryNotice(
        attempt=details["attempt"],
        max_attempts=details["max_attempts"],
        wait_ms=details["wait_ms"],
        reason=details["reason"],
        message=retry_message(details["attempt"], details["max_attempts"], details["wait_ms"], details["reason"]),
    )
    try:
        handle = activity.client().get_workflow_handle(info.workflow_id or "", run_id=info.workflow_run_id)
        await handle.signal(signal, notice, rpc_timeout=_SIGNAL_TIMEOUT)
    except Exception as exc:
        activity.logger.warning("could not report the LLM retry to the run: %s", exc)
