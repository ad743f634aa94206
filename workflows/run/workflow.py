"""The run workflow: one agent run on one thread, durable from the first hook to the last commit.

    load thread state (activity)
    before_agent                                   list order
    loop:
        before_model                               list order
        wrap_model_call chain → model activity     first middleware outermost
        after_model                                reverse order; jump_to="model" skips the tools
        tool calls, in parallel, each through the wrap_tool_call chain → tool activity
        a clarification interrupt → commit, pause until a reply (signal or update), continue
    after_agent                                    reverse order, in ``finally``: also on failure and cancel
    commit thread state (activity)

The workflow id is derived from the thread id, so Temporal itself guarantees one active run per thread.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.exceptions import ApplicationError, is_cancelled_exception

import workflows.run.mcp_tools as mcp_tools
from middlewares.base import Middleware, ModelRequest
from middlewares.chain import build_lead_chain, describe
from middlewares.context import ActivityOptions, TemporalRunContext
from middlewares.deferred_tool_filter import TOOL_SEARCH
from middlewares.llm_error_handling import model_retry_policy, retry_budget
from middlewares.run_settings import RunSettings
from vocabulary.contracts import (
    LLM_RETRY_SIGNAL,
    MODEL_INVOKE,
    THREAD_COMMIT,
    THREAD_LOAD,
    LlmRetryNotice,
    McpToolInfo,
    ModelCallInput,
    ThreadCommitInput,
    ThreadCommitResult,
    ThreadLoadInput,
    ThreadRef,
    ThreadSnapshot,
)
from vocabulary.human_input import Reply
from vocabulary.messages import last_ai_message, message_text
from vocabulary.state import StateUpdate, ThreadState, apply_update
from vocabulary.text import model_label
from vocabulary.tools import ToolCatalog, ToolSpec
from vocabulary.transcript import MessageHasher, TranscriptCursor, preamble_json
from workflows.run.archive import archive_run, archives_runs
from workflows.run.carry import RunCarry
from workflows.run.dispatcher import Dispatcher
from workflows.run.input_check import input_problem, message_problem
from workflows.run.io import CarriedRun, ReplyInput, RunInput, RunStatus, RunView
from workflows.run.pause import STOP_CLARIFICATION_TIMEOUT, RunPause
from workflows.run.prompt import SYSTEM_PROMPT
from workflows.run.queries import RunQueries
from workflows.run.state_stream import MESSAGES_TOPIC, StatePublisher
from workflows.run.tools import RunTools

__all__ = [
    "PROGRESS_TOPIC",
    "STOP_CLARIFICATION_TIMEOUT",
    "STOP_RECURSION_LIMIT",
    "WORKFLOW_NAME",
    "CarriedRun",
    "ReplyInput",
    "RunInput",
    "RunStatus",
    "RunView",
    "RunWorkflow",
    "input_problem",
    "message_problem",
]

WORKFLOW_NAME = "HartflowRun"

PROGRESS_TOPIC = "progress"
"""The workflow-stream topic carrying the run's progress events (``RunEvent.as_dict()``)."""
_INPUT_CHECK_PATCH = "hartflow-input-check"
_INVALID_TOOL_CALLS_PATCH = "hartflow-answer-invalid-tool-calls"
_PREAMBLE_PATCH = "hartflow-preamble-by-hash"

STOP_RECURSION_LIMIT = "recursion_limit"

_STORE_OPTIONS = ActivityOptions(
    start_to_close=timedelta(seconds=60),
    retry=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)),
)


@workflow.defn(name=WORKFLOW_NAME)
class RunWorkflow(RunTools, RunPause, RunQueries, RunCarry):
    """The lifecycle and the turn. The rest are mixins beside it: the tool calls (``workflows/run/tools.py``),
    delegation (``_delegate.py``), the pause (``_pause.py``), Web UI visibility (``_visibility.py``), the queries
    (``_view.py``) and what continue-as-new carries (``_carry.py``)."""

    @workflow.init
    def __init__(self, input: RunInput) -> None:
        info = workflow.info()
        self._input = input
        self._ctx = TemporalRunContext(
            thread=ThreadRef(input.user_id, input.thread_id),
            run_id=info.first_execution_run_id,
            workflow_id=info.workflow_id,
            model=input.model,
            settings=input.settings,
        )
        self._chain: list[Middleware] = build_lead_chain(input.settings)
        self._catalog = self._lead_catalog(input.settings)
        self._mcp_tools: list[McpToolInfo] | None = None
        self._status: RunStatus = "running"
        self._pending: dict[str, Any] | None = None
        self._reply: Reply | None = None
        self._final_message: str | None = None
        self._model_calls = 0
        self._version = 0
        self._last_tool: str | None = None
        self._notice: str | None = None
        self._state = ThreadState()
        self._transcript = TranscriptCursor()
        self._message_hasher = MessageHasher()
        self._continue_as_new_requested = False
        self._running_subagents: dict[str, str] = {}
        """Subagents this run is waiting for: child workflow id → task description (current details)."""
        # Progress events also go to a workflow stream: ``hartflow run`` follows it live, and a client that
        # reconnects resumes from its offset. The SDK requires building it here, in __init__.
        prior = input.carried.stream if input.carried is not None else None
        self._stream = WorkflowStream(prior_state=prior)
        progress = self._stream.topic(PROGRESS_TOPIC, type=dict)
        self._ctx.event_offset = prior.base_offset + len(prior.log) if prior is not None else 0
        self._ctx.publish = lambda event: progress.publish(event.as_dict())
        # API clients stream the thread state (values, messages) from the same stream: the run publishes it.
        self._state_publisher = StatePublisher(self._stream.topic(MESSAGES_TOPIC, type=dict))
        self._ctx.before_emit = self._publish_state

    def _lead_catalog(self, settings: RunSettings, mcp: list[ToolSpec] | None = None) -> ToolCatalog:
        return (
            ToolCatalog.builtin(exclude=frozenset({"ask_clarification"}) if settings.non_interactive else frozenset())
            .with_tools(tool for mw in self._chain for tool in mw.tools())
            .with_tools(mcp or [])
        )

    # -- the run ------------------------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: RunInput) -> RunView:
        ctx = self._ctx
        problem = input_problem(input) if input.carried is None else None
        # Only a refused input takes the patch: valid runs, and their histories, are unchanged by it.
        if problem is not None and workflow.patched(_INPUT_CHECK_PATCH):
            raise ApplicationError(problem, type="BadInput", non_retryable=True)
        await self._add_mcp_tools(input)
        dispatcher = Dispatcher(self._chain, ctx)
        if input.carried is None:
            workflow.logger.info("run %s starts with chain: %s", ctx.run_id, " → ".join(describe(self._chain)))
        await self._start(input)
        self._sync_search_attributes()
        failure: Exception | asyncio.CancelledError | None = None
        try:
            if input.carried is None:
                self._state = (await dispatcher.before_agent(self._state)).state
            await self._loop(dispatcher)
        except (Exception, asyncio.CancelledError) as exc:
            # A failure or a cancellation: after_agent is the compensation. Nothing wider: the SDK tears a run
            # down with BaseExceptions (eviction, GeneratorExit when an orphaned coroutine is collected), and a
            # run that swallowed one would go on issuing commands in whichever run owns the thread then.
            failure = exc
        if failure is None and self._continue_as_new_requested:
            # Release the stream's waiting subscribers (new ones retry until the continued run answers).
            self._stream.detach_pollers()
            await self._commit()
            self._continue_as_new()
        try:
            self._state = (await dispatcher.after_agent(self._state)).state
        except Exception as exc:
            workflow.logger.error("after_agent failed: %s", exc)
            failure = failure or exc
        await self._commit()
        return await self._finish(failure)

    async def _add_mcp_tools(self, input: RunInput) -> None:
        """The configured MCP servers' tools join the catalog (deferred with tool_search), discovered once per
        run; runs without MCP servers issue no command here."""
        if not input.settings.mcp_servers:
            return
        carried = input.carried.mcp_tools if input.carried is not None else None
        if carried is None:
            taken = set(self._catalog.names()) | {TOOL_SEARCH}
            carried = await mcp_tools.run_tools(self._ctx, list(input.settings.mcp_servers), taken=taken)
        self._mcp_tools = carried
        specs = [mcp_tools.tool_spec(tool) for tool in carried]
        self._chain = build_lead_chain(input.settings, mcp_tools=specs)
        self._catalog = self._lead_catalog(input.settings, specs)

    async def _start(self, input: RunInput) -> None:
        carried = input.carried
        if carried is not None:
            self._resume(carried)
            return
        snapshot = await self._ctx.call(
            THREAD_LOAD,
            ThreadLoadInput(self._ctx.thread),
            result_type=ThreadSnapshot,
            summary="load thread state",
            options=_STORE_OPTIONS,
        )
        self._version = snapshot.version
        self._state = snapshot.state
        message = HumanMessage(content=input.message, id=input.message_id or self._ctx.uuid())
        if input.files:
            message.additional_kwargs["files"] = list(input.files)
        self._apply({"messages": [message]})

    def _publish_state(self) -> None:
        self._ctx.event_offset += self._state_publisher.sync(self._state)

    def _apply(self, update: StateUpdate) -> None:
        self._state = apply_update(self._state, update, new_id=self._ctx.uuid)

    async def _loop(self, dispatcher: Dispatcher) -> None:
        """The agent loop. It keeps ``self._state`` current after every step, so whatever ends the loop (an
        answer, a limit, a failure, a cancellation) leaves the latest state for after_agent and the commit."""
        while not self._out_of_turns():
            before = await dispatcher.before_model(self._state)
            self._state = before.state
            if before.jump_to == "end":
                return
            await self._model_turn(dispatcher)
            after = await dispatcher.after_model(self._state)
            self._state = after.state
            if after.jump_to == "model":
                continue
            if after.jump_to == "end":
                return
            if not await self._tool_turn(dispatcher):
                return

    def _out_of_turns(self) -> bool:
        """The run stops here (the recursion limit), or goes on in a continued run (history grew large)."""
        ctx = self._ctx
        if self._model_calls >= ctx.settings.recursion_limit:
            ctx.stop_reason = STOP_RECURSION_LIMIT
            ctx.emit("stopped", reason=STOP_RECURSION_LIMIT)
            return True
        if self._model_calls and workflow.info().is_continue_as_new_suggested():
            self._continue_as_new_requested = True
            return True
        return False

    async def _model_turn(self, dispatcher: Dispatcher) -> None:
        ctx = self._ctx
        ctx.turn += 1
        self._model_calls += 1
        self._sync_search_attributes()
        self._update_details()
        request = ModelRequest(
            messages=list(self._state.messages),
            system_message=SystemMessage(SYSTEM_PROMPT),
            tools=list(self._catalog.tools.values()),
            state=self._state,
            ctx=ctx,
            model=ctx.model,
        )
        self._apply({"messages": [await dispatcher.call_model(request, self._invoke_model)]})

    async def _tool_turn(self, dispatcher: Dispatcher) -> bool:
        """Run the last answer's tool calls; ``False`` when the run ends here (an answer without calls, a
        clarification that timed out, or only ``return_direct`` tools)."""
        ai = last_ai_message(self._state.messages)
        calls = list(ai.tool_calls) if ai is not None else []
        # A stop reason means a hard stop (LoopDetection, SafetyFinishReason) cleared this turn's calls so the
        # run ends on it: invalid calls they leave behind must not start another turn.
        invalid = list(ai.invalid_tool_calls) if ai is not None and not self._ctx.stop_reason else []
        if invalid and workflow.patched(_INVALID_TOOL_CALLS_PATCH):
            # DeerFlow leaves such calls dangling until the next model request patches them, so a turn of
            # only invalid calls ends the run on a broken answer. Answering them with the same error text
            # lets the model see what was wrong and try again in this run (recursion_limit still bounds it).
            self._apply({"messages": [self._invalid_call_result(call) for call in invalid]})
            if not calls:
                return True
        if not calls:
            if ai is not None:
                self._final_message = message_text(ai)
            return False
        interrupt = await self._run_tools(dispatcher, calls)
        if interrupt is not None:
            return await self._pause(interrupt)
        return not all((spec := self._catalog.get(c["name"])) is not None and spec.return_direct for c in calls)

    async def _invoke_model(self, request: ModelRequest) -> AIMessage:
        ctx = self._ctx
        settings = ctx.settings.model_call
        llm = ctx.settings.middlewares.llm_error_handling
        ctx.emit("model_call", turn=ctx.turn)
        # The messages go by reference: only those the previous request did not carry travel in history; so do
        # the system message and tool schemas, in runs started since the patch (older ones send them inline).
        tools = [tool.schema() for tool in request.tools]
        by_hash = workflow.patched(_PREAMBLE_PATCH)
        preamble = preamble_json(request.system_message, tools) if by_hash else None
        transcript, cursor = self._transcript.reference(ctx.thread, request.messages, self._message_hasher, preamble)
        message = await ctx.call(
            MODEL_INVOKE,
            ModelCallInput(
                model=request.model,
                messages=[],
                transcript=transcript,
                system_message=None if by_hash else request.system_message,
                tools=[] if by_hash else tools,
                purpose="agent",
                call_index=ctx.next_call_index("agent"),
                run_key=f"{ctx.workflow_id}/{ctx.run_id}",
                retry=retry_budget(llm),
                retry_signal=LLM_RETRY_SIGNAL,
            ),
            result_type=AIMessage,
            summary=f"model {model_label(request.model)} · turn {ctx.turn}",
            options=ActivityOptions(
                start_to_close=timedelta(seconds=settings.timeout_seconds),
                heartbeat=timedelta(seconds=settings.heartbeat_seconds),
                retry=model_retry_policy(llm),
            ),
        )
        self._transcript = cursor
        return message

    @workflow.signal(
        name=LLM_RETRY_SIGNAL,
        description="A model.invoke attempt failed and Temporal will retry it (recorded as an llm_retry event).",
    )
    def llm_retry(self, notice: LlmRetryNotice) -> None:
        self._ctx.emit(
            "llm_retry",
            attempt=notice.attempt,
            max_attempts=notice.max_attempts,
            wait_ms=notice.wait_ms,
            reason=notice.reason,
            message=notice.message,
        )

    # -- ending -------------------------------------------------------------------------------------------

    async def _commit(self) -> None:
        result = await self._ctx.call(
            THREAD_COMMIT,
            ThreadCommitInput(self._ctx.thread, self._state, self._version, self._ctx.run_id),
            result_type=ThreadCommitResult,
            summary="commit thread state",
            options=_STORE_OPTIONS,
        )
        self._version = result.version

    async def _finish(self, failure: Exception | asyncio.CancelledError | None) -> RunView:
        ai = last_ai_message(self._state.messages)
        if self._final_message is None and ai is not None and not ai.tool_calls:
            self._final_message = message_text(ai)
        status: RunStatus
        if failure is None:
            errored = ai is not None and bool(ai.additional_kwargs.get("deerflow_error_fallback"))
            status = "error" if errored else "completed"
        else:
            status = "cancelled" if _is_cancellation(failure) else "error"
        if archives_runs():
            # Archived before the status turns final, so a client that saw the run settle finds the archive.
            self._ctx.emit("run_finished", status=status, stop_reason=self._ctx.stop_reason)
            await archive_run(self._ctx, self._final_view(status, failure), self._stream.get_state(), self._version)
            self._set_status(status)
        else:
            self._set_status(status)
            self._ctx.emit("run_finished", status=self._status, stop_reason=self._ctx.stop_reason)
        # Stream subscribers get their last events now; waiting for them to stop polling would never end.
        self._stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)
        if failure is None:
            return self._view()
        if _is_cancellation(failure):
            raise failure
        raise ApplicationError(f"run failed: {failure}", type="RunFailed", non_retryable=True) from failure


def _is_cancellation(exc: BaseException) -> bool:
    return is_cancelled_exception(exc)
