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
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, NoReturn

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey, SearchAttributeUpdate
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamState
from temporalio.exceptions import ApplicationError, ChildWorkflowError, is_cancelled_exception
from temporalio.workflow import HandlerUnfinishedPolicy

with workflow.unsafe.imports_passed_through():
    from langchain_core.messages import AIMessage, HumanMessage, InvalidToolCall, SystemMessage, ToolMessage

from middlewares.base import Command, Middleware, ModelRequest, ToolCallRequest, ToolResult
from middlewares.chain import build_lead_chain, describe
from middlewares.context import ActivityOptions, TemporalRunContext
from middlewares.dangling_tool_call import invalid_call_result
from middlewares.deferred_tool_filter import TOOL_SEARCH
from middlewares.llm_error_handling import model_retry_policy, retry_budget
from middlewares.run_settings import RunSettings
from middlewares.token_usage import TokenUsageMiddleware
from vocabulary.contracts import (
    LLM_RETRY_SIGNAL,
    MODEL_INVOKE,
    THREAD_COMMIT,
    THREAD_LOAD,
    TOOL_EXECUTE,
    LlmRetryNotice,
    McpToolInfo,
    ModelCallInput,
    ThreadCommitInput,
    ThreadCommitResult,
    ThreadLoadInput,
    ThreadRef,
    ThreadSnapshot,
    ToolCallInput,
    ToolCallOutput,
)
from vocabulary.delegation import SUBAGENT_STATUS_KEY, TASK_TOOL_NAME, task_result_message
from vocabulary.human_input import (
    InvalidReplyError,
    Reply,
    parse_reply,
    request_markdown,
    response_message,
    validate_reply,
)
from vocabulary.messages import message_text
from vocabulary.paths import InvalidIdError, validate_thread_id, validate_user_id
from vocabulary.state import StateUpdate, ThreadState, apply_update
from vocabulary.tools import ToolCatalog, ToolSpec
from vocabulary.transcript import MessageHasher, TranscriptCursor, preamble_json
from workflows import mcp_tools
from workflows import search_attributes as sa
from workflows.delegation import (
    SUBAGENT_WORKFLOW_NAME,
    SubagentTask,
    UnknownSubagentTypeError,
    child_workflow_id,
    finished_child_message,
    interrupted_child_message,
    subagent_task,
)
from workflows.dispatcher import Dispatcher
from workflows.prompt import SYSTEM_PROMPT

WORKFLOW_NAME = "HartflowRun"
WORKFLOW_ID_PREFIX = "hartflow-"

RunStatus = Literal["running", "awaiting_input", "completed", "error", "cancelled"]

PROGRESS_TOPIC = "progress"
"""The workflow-stream topic carrying the run's progress events (``RunEvent.as_dict()``)."""
_VISIBILITY_PATCH = "hartflow-visibility-sync"
_INPUT_CHECK_PATCH = "hartflow-input-check"
_INVALID_TOOL_CALLS_PATCH = "hartflow-answer-invalid-tool-calls"
_PREAMBLE_PATCH = "hartflow-preamble-by-hash"

STOP_RECURSION_LIMIT = "recursion_limit"
STOP_CLARIFICATION_TIMEOUT = "clarification_timeout"

_STORE_OPTIONS = ActivityOptions(
    start_to_close=timedelta(seconds=60),
    retry=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)),
)


def workflow_id_for(thread_id: str) -> str:
    return f"{WORKFLOW_ID_PREFIX}{thread_id}"


@dataclass
class CarriedRun:
    """What a run carries across continue-as-new: the state in memory and the run-scoped counters."""

    state: ThreadState
    version: int
    turn: int
    model_calls: int
    call_counts: dict[str, int]
    stop_reason: str | None
    sandbox_id: str | None
    memory: dict[str, dict[str, Any]] = field(default_factory=dict)
    stream: WorkflowStreamState | None = None
    """The progress stream (its events and offsets), so a subscriber reads on across the continue-as-new."""
    transcript: TranscriptCursor | None = None
    """The last model request's message ids and manifest: the continued run sends only what is new."""
    mcp_tools: list[McpToolInfo] | None = None
    """The MCP tools this run discovered: the continued run keeps them instead of asking the servers again."""


@dataclass
class RunInput:
    thread_id: str
    message: str
    model: str
    user_id: str = "default"
    settings: RunSettings = field(default_factory=RunSettings)
    message_id: str | None = None
    files: list[str] = field(default_factory=list)
    carried: CarriedRun | None = None
    subagent: SubagentTask | None = None
    """Set when this run is a subagent (``workflows/subagent.py``) working on a lead run's ``task`` call."""


@dataclass
class RunView:
    """A run as clients see it: the ``status`` query, the ``wait_settled`` update and the run's result."""

    thread_id: str
    run_id: str
    workflow_id: str
    status: RunStatus
    stop_reason: str | None
    final_message: str | None
    pending_input: dict[str, Any] | None
    turns: int
    model: str
    usage: dict[str, int] | None = None
    """The run's token totals (``input_tokens``, ``output_tokens``, ``total_tokens``); ``None`` when
    TokenUsage is off."""


@dataclass
class ReplyInput:
    answer: str | None = None
    option_id: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    request_id: str | None = None


@workflow.defn(name=WORKFLOW_NAME)
class RunWorkflow:
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
        failure: BaseException | None = None
        try:
            if input.carried is None:
                self._state = (await dispatcher.before_agent(self._state)).state
            await self._loop(dispatcher)
        except BaseException as exc:  # cancellation too: after_agent is the compensation
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
            self._version = carried.version
            self._model_calls = carried.model_calls
            self._ctx.turn = carried.turn
            self._ctx.call_counts = dict(carried.call_counts)
            self._ctx.stop_reason = carried.stop_reason
            self._ctx.sandbox_id = carried.sandbox_id
            for mw in self._chain:
                if mw.name in carried.memory:
                    mw.import_memory(carried.memory[mw.name])
            self._state = carried.state
            self._transcript = carried.transcript or TranscriptCursor()
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

    def _apply(self, update: StateUpdate) -> None:
        self._state = apply_update(self._state, update, new_id=self._ctx.uuid)

    async def _loop(self, dispatcher: Dispatcher) -> None:
        """The agent loop. It keeps ``self._state`` current after every step, so whatever ends the loop (an
        answer, a limit, a failure, a cancellation) leaves the latest state for after_agent and the commit."""
        ctx = self._ctx
        while True:
            if self._model_calls >= ctx.settings.recursion_limit:
                ctx.stop_reason = STOP_RECURSION_LIMIT
                ctx.emit("stopped", reason=STOP_RECURSION_LIMIT)
                return
            if self._model_calls and workflow.info().is_continue_as_new_suggested():
                self._continue_as_new_requested = True
                return

            before = await dispatcher.before_model(self._state)
            self._state = before.state
            if before.jump_to == "end":
                return

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

            after = await dispatcher.after_model(self._state)
            self._state = after.state
            if after.jump_to == "model":
                continue
            if after.jump_to == "end":
                return

            ai = _last_ai_message(self._state)
            calls = list(ai.tool_calls) if ai is not None else []
            # A stop reason means a hard stop (LoopDetection, SafetyFinishReason) cleared this turn's calls so the
            # run ends on it: invalid calls they leave behind must not start another turn.
            invalid = list(ai.invalid_tool_calls) if ai is not None and not ctx.stop_reason else []
            if invalid and workflow.patched(_INVALID_TOOL_CALLS_PATCH):
                # DeerFlow leaves such calls dangling until the next model request patches them, so a turn of
                # only invalid calls ends the run on a broken answer. Answering them with the same error text
                # lets the model see what was wrong and try again in this run (recursion_limit still bounds it).
                self._apply({"messages": [self._invalid_call_result(call) for call in invalid]})
                if not calls:
                    continue
            if not calls:
                if ai is not None:
                    self._final_message = message_text(ai)
                return

            state = self._state
            results = await asyncio.gather(
                *(self._run_tool(dispatcher, state, dict(call)) for call in calls), return_exceptions=True
            )
            interrupt: dict[str, Any] | None = None
            for result in results:
                if isinstance(result, Command):
                    self._apply(result.update)
                    interrupt = interrupt or result.interrupt
                elif not isinstance(result, BaseException):
                    self._apply({"messages": [result]})
            failed = next((r for r in results if isinstance(r, BaseException)), None)
            if failed is not None:
                raise failed

            if interrupt is not None:
                if not await self._pause(interrupt):
                    return
                continue
            if all((spec := self._catalog.get(c["name"])) is not None and spec.return_direct for c in calls):
                return

    def _invalid_call_result(self, call: InvalidToolCall) -> ToolMessage:
        result = invalid_call_result(call, message_id=self._ctx.uuid())
        self._ctx.emit("tool_result", tool=result.name, call_id=result.tool_call_id, status="error")
        return result

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
            summary=f"model {_model_label(request.model)} · turn {ctx.turn}",
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

    async def _run_tool(self, dispatcher: Dispatcher, state: ThreadState, call: dict[str, Any]) -> ToolResult:
        request = ToolCallRequest(dict(call), self._catalog.get(str(call.get("name"))), state, self._ctx)
        return await dispatcher.call_tool(request, self._execute_tool)

    async def _execute_tool(self, request: ToolCallRequest) -> ToolResult:
        ctx = self._ctx
        name, call_id = request.name, request.call_id
        if request.tool is None or request.tool.intercepted:
            available = ", ".join(self._catalog.names())
            return ToolMessage(
                f"Error: {name} is not a valid tool, try one of [{available}].",
                tool_call_id=call_id,
                name=name,
                status="error",
                id=ctx.uuid(),
            )
        if name == TASK_TOOL_NAME:
            return await self._delegate(request)
        preview = _preview(request.args)
        label = f"{name} · {preview}" if preview else name
        self._last_tool = label
        self._update_details()
        ctx.emit("tool_call", tool=name, call_id=call_id, args=preview)
        if request.tool.server is not None:
            return await mcp_tools.execute(request, summary=f"tool {label}")
        settings = ctx.settings.tool_call
        sandbox_id = ctx.sandbox_id or (request.state.sandbox or {}).get("sandbox_id")
        if sandbox_id is None and request.tool.sandbox:
            ctx.sandbox_unreported = True  # until an id comes back: a cancellation or failure may leave it so
        output = await ctx.call(
            TOOL_EXECUTE,
            ToolCallInput(ctx.thread, request.tool_call, sandbox_id=sandbox_id, run_key=ctx.workflow_id),
            result_type=ToolCallOutput,
            summary=f"tool {label}",
            options=ActivityOptions(
                start_to_close=timedelta(seconds=settings.timeout_seconds),
                heartbeat=timedelta(seconds=settings.heartbeat_seconds),
                retry=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=settings.max_attempts),
            ),
        )
        if output.sandbox_id:
            ctx.sandbox_id = output.sandbox_id
            ctx.sandbox_unreported = False
        ctx.emit("tool_result", tool=name, call_id=call_id, status=output.status)
        return ToolMessage(
            output.content,
            tool_call_id=call_id,
            name=name,
            status=output.status,
            artifact=output.artifact,
            id=ctx.uuid(),
        )

    async def _delegate(self, request: ToolCallRequest) -> ToolMessage:
        """The ``task`` tool: a subagent run as a child workflow (``HartflowSubagent``), visible under this run in
        the Web UI, cancelled with it (its cancellation reaches the child; so does closing this run), timed out
        after ``run.subagents.timeout_seconds``. Its answer, failure or timeout comes back as the task result."""
        ctx = self._ctx
        subagents = ctx.settings.subagents
        sandbox_id = ctx.sandbox_id or (request.state.sandbox or {}).get("sandbox_id")
        if sandbox_id is None:
            ctx.sandbox_unreported = True  # the child may acquire the thread's sandbox; it never reports the id
        try:
            task, prompt, max_turns = subagent_task(
                request.tool_call, subagents, parent_workflow_id=ctx.workflow_id, sandbox_id=sandbox_id
            )
        except UnknownSubagentTypeError as exc:
            return task_result_message(request.call_id, "failed", error=str(exc), message_id=ctx.uuid())
        child_id = child_workflow_id(ctx.workflow_id, request.call_id)
        model = subagents.model or ctx.model
        settings = ctx.settings.model_copy(
            update={"recursion_limit": max_turns, "subagent_enabled": False, "non_interactive": True}
        )
        self._running_subagents[child_id] = task.description
        self._update_details()
        ctx.emit("subagent_started", call_id=request.call_id, workflow_id=child_id, description=task.description)
        try:
            view = await workflow.execute_child_workflow(
                SUBAGENT_WORKFLOW_NAME,
                RunInput(
                    thread_id=ctx.thread_id,
                    message=prompt,
                    model=model,
                    user_id=ctx.user_id,
                    settings=settings,
                    subagent=task,
                ),
                id=child_id,
                result_type=RunView,
                parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
                execution_timeout=timedelta(seconds=subagents.timeout_seconds),
                static_summary=f"subagent {task.subagent_type} · {task.description}",
            )
        except ChildWorkflowError as exc:
            interrupted = interrupted_child_message(
                request.call_id, exc, message_id=ctx.uuid(), timeout_seconds=subagents.timeout_seconds
            )
            # A cancelled lead run cancels its children too: that must stay a cancellation, not a result.
            if interrupted is None or workflow.cancellation_reason() is not None:
                raise
            result = interrupted
        else:
            result = finished_child_message(
                request.call_id,
                message_id=ctx.uuid(),
                status=view.status,
                final_message=view.final_message,
                stop_reason=view.stop_reason,
                model_name=model,
                usage=view.usage,
            )
        finally:
            self._running_subagents.pop(child_id, None)
            self._update_details()
        status = result.additional_kwargs.get(SUBAGENT_STATUS_KEY)
        ctx.emit(
            "subagent_finished",
            call_id=request.call_id,
            workflow_id=child_id,
            description=task.description,
            status=status,
        )
        return result

    # -- the clarification pause --------------------------------------------------------------------------

    async def _pause(self, request: dict[str, Any]) -> bool:
        """Commit, wait durably for a reply, and turn it into the hidden HumanMessage DeerFlow's UI sends.
        Returns False when the wait timed out."""
        ctx = self._ctx
        await self._commit()
        self._pending = request
        self._set_status("awaiting_input")
        ctx.emit("awaiting_input", request_id=request.get("request_id"), question=request.get("question"))
        try:
            await workflow.wait_condition(
                lambda: self._reply is not None,
                timeout=ctx.settings.clarification_timeout,
                timeout_summary="awaiting clarification",
            )
        except TimeoutError:
            self._pending = None
            ctx.stop_reason = STOP_CLARIFICATION_TIMEOUT
            ctx.emit("stopped", reason=STOP_CLARIFICATION_TIMEOUT)
            return False
        assert self._reply is not None
        message = response_message(request, self._reply, message_id=ctx.uuid())
        self._reply = None
        self._pending = None
        self._set_status("running")
        ctx.emit("resumed", request_id=request.get("request_id"))
        self._apply({"messages": [message]})
        return True

    @workflow.update(
        name="reply",
        description="Answer the pending clarification (validated; rejected replies leave no history).",
    )
    async def reply(self, answer: ReplyInput) -> RunView:
        self._accept(Reply(answer.answer, answer.option_id, dict(answer.fields), answer.request_id))
        return self._view()

    @reply.validator
    def _validate_reply(self, answer: ReplyInput) -> None:
        validate_reply(self._pending, Reply(answer.answer, answer.option_id, dict(answer.fields), answer.request_id))

    @workflow.signal(
        name="clarification_reply",
        description='Answer the pending clarification: a string, or {"answer", "option_id", "fields", "request_id"}.',
    )
    def clarification_reply(self, payload: Any) -> None:
        try:
            reply = parse_reply(payload)
            validate_reply(self._pending, reply)
        except InvalidReplyError as exc:
            self._notice = f"ignored a clarification_reply signal: {exc}"
            workflow.logger.warning(self._notice)
            self._update_details()
            return
        self._accept(reply)

    def _accept(self, reply: Reply) -> None:
        self._reply = reply
        self._notice = None
        # Flip now, so a client that waits for the run to settle right after replying sees it running.
        self._set_status("running")

    # -- queries and updates clients use ------------------------------------------------------------------

    @workflow.query(name="status", description="The run: status, stop reason, turns, pending question.")
    def status(self) -> RunView:
        return self._view()

    @workflow.query(name="pending_input", description="The pending human_input_request payload, or null.")
    def pending_input(self) -> dict[str, Any] | None:
        return self._pending

    @workflow.query(name="chain", description="The middleware chain of this run, outermost first.")
    def chain(self) -> list[str]:
        return describe(self._chain)

    @workflow.query(
        name="events",
        description="Progress events (turns, tools, retries, pauses) from the given seq on, since the last "
        "continue-as-new; the workflow stream's topic 'progress' has the whole run.",
    )
    def events(self, offset: int = 0) -> list[dict[str, Any]]:
        return [event.as_dict() for event in self._ctx.events if event.seq >= offset]

    @workflow.query(
        name="state",
        description="The thread state in brief: one line per message, title, todos, artifacts, sandbox, uploads.",
    )
    def state(self) -> dict[str, Any]:
        return _state_brief(self._state)

    @workflow.update(
        name="wait_settled",
        description="Returns once the run is waiting for input or has ended.",
        # A waiter is abandoned on continue-as-new; the client asks the continued run again.
        unfinished_policy=HandlerUnfinishedPolicy.ABANDON,
    )
    async def wait_settled(self) -> RunView:
        await workflow.wait_condition(lambda: self._status != "running")
        return self._view()

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

    async def _finish(self, failure: BaseException | None) -> RunView:
        ai = _last_ai_message(self._state)
        if self._final_message is None and ai is not None and not ai.tool_calls:
            self._final_message = message_text(ai)
        if failure is None:
            errored = ai is not None and bool(ai.additional_kwargs.get("deerflow_error_fallback"))
            self._set_status("error" if errored else "completed")
        elif _is_cancellation(failure):
            self._set_status("cancelled")
        else:
            self._set_status("error")
        self._ctx.emit("run_finished", status=self._status, stop_reason=self._ctx.stop_reason)
        # Stream subscribers get their last events now; waiting for them to stop polling would never end.
        self._stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)
        if failure is None:
            return self._view()
        if _is_cancellation(failure):
            raise failure
        raise ApplicationError(f"run failed: {failure}", type="RunFailed", non_retryable=True) from failure

    def _continue_as_new(self) -> NoReturn:
        ctx = self._ctx
        carried = CarriedRun(
            state=self._state,
            version=self._version,
            turn=ctx.turn,
            model_calls=self._model_calls,
            call_counts=dict(ctx.call_counts),
            stop_reason=ctx.stop_reason,
            sandbox_id=ctx.sandbox_id,
            memory={mw.name: memory for mw in self._chain if (memory := mw.export_memory()) is not None},
            stream=self._stream.get_state(),
            transcript=self._transcript,
            mcp_tools=self._mcp_tools,
        )
        workflow.continue_as_new(
            RunInput(
                thread_id=self._input.thread_id,
                message=self._input.message,
                model=self._input.model,
                user_id=self._input.user_id,
                settings=self._input.settings,
                carried=carried,
                subagent=self._input.subagent,
            )
        )

    def _set_status(self, status: RunStatus) -> None:
        self._status = status
        self._sync_search_attributes(status_changed=True)
        self._update_details()

    def _sync_search_attributes(self, *, status_changed: bool = False) -> None:
        """Bring the run's search attributes up to date: thread, user and model (whoever started the run),
        status, turns and stop reason. Only values that changed are upserted, so an unchanged run adds no
        history event."""
        ctx = self._ctx
        if not workflow.patched(_VISIBILITY_PATCH):
            # Runs started before this patch upserted status and turns on each status change, and nothing else;
            # replaying them must issue exactly those commands.
            if status_changed:
                legacy: list[SearchAttributeUpdate[Any]] = [
                    sa.STATUS.value_set(self._status),
                    sa.TURNS.value_set(ctx.turn),
                ]
                if ctx.stop_reason:
                    legacy.append(sa.STOP_REASON.value_set(ctx.stop_reason))
                workflow.upsert_search_attributes(legacy)
            return
        wanted: list[tuple[SearchAttributeKey[Any], str | int | None]] = [
            (sa.THREAD_ID, ctx.thread_id),
            (sa.USER_ID, ctx.user_id),
            (sa.MODEL, ctx.model),
            (sa.STATUS, self._status),
            (sa.TURNS, ctx.turn),
            (sa.STOP_REASON, ctx.stop_reason),
        ]
        current = workflow.info().typed_search_attributes
        updates = [key.value_set(value) for key, value in wanted if value is not None and current.get(key) != value]
        if updates:
            workflow.upsert_search_attributes(updates)

    def _update_details(self) -> None:
        ctx = self._ctx
        lines = [f"**Status:** {self._status} · turn {ctx.turn}"]
        if self._final_message and self._status != "running":
            lines.append(f"**Answer:** {_shorten(self._final_message, 300)}")
        if self._last_tool:
            lines.append(f"**Last tool:** {self._last_tool}")
        if ctx.stop_reason:
            lines.append(f"**Stop reason:** {ctx.stop_reason}")
        if self._pending:
            lines.extend(request_markdown(self._pending))
        if self._running_subagents:
            lines.append(f"**Subagents running:** {', '.join(self._running_subagents.values())}")
        if self._notice:
            lines.append(f"**Notice:** {self._notice}")
        workflow.set_current_details("\n\n".join(lines))

    def _view(self) -> RunView:
        ctx = self._ctx
        return RunView(
            thread_id=ctx.thread_id,
            run_id=ctx.run_id,
            workflow_id=ctx.workflow_id,
            status=self._status,
            stop_reason=ctx.stop_reason,
            final_message=self._final_message,
            pending_input=self._pending,
            turns=ctx.turn,
            model=ctx.model,
            usage=next((mw.usage() for mw in self._chain if isinstance(mw, TokenUsageMiddleware)), None),
        )


def _last_ai_message(state: ThreadState) -> AIMessage | None:
    for message in reversed(state.messages):
        if isinstance(message, AIMessage):
            return message
    return None


def _is_cancellation(exc: BaseException) -> bool:
    return is_cancelled_exception(exc)


def message_problem(message: str, limit: int) -> str | None:
    """Why a run refuses this user message (empty, or longer than ``run.max_message_chars``), or ``None``."""
    if not message.strip():
        return "the message is empty"
    if len(message) > limit:
        return f"the message is {len(message)} characters; the limit is {limit} (run.max_message_chars)"
    return None


def input_problem(input: RunInput) -> str | None:
    """What makes a new run's input unusable, or ``None``. The CLI refuses these before starting anything;
    this is the same check for any other client, which gets a ``BadInput`` failure before anything is written."""
    try:
        validate_thread_id(input.thread_id)
        validate_user_id(input.user_id)
    except InvalidIdError as exc:
        return str(exc)
    return message_problem(input.message, input.settings.max_message_chars)


def _model_label(spec: str) -> str:
    provider, _, name = spec.partition(":")
    if provider == "scripted":
        name = name.replace("\\", "/").rsplit("/", 1)[-1]
    return f"{provider}:{name}" if name else provider


def _preview(args: Any, limit: int = 60) -> str:
    if isinstance(args, dict):
        for key in ("command", "path", "pattern", "question"):
            if isinstance(args.get(key), str):
                return _shorten(args[key], limit)
    return ""


def _shorten(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _state_brief(state: ThreadState) -> dict[str, Any]:
    """The ``state`` query: every channel that has a value; messages and the summary cut to one line each,
    images as their paths only."""
    brief: dict[str, Any] = {
        key: value
        for key, value in state.model_dump(mode="json", exclude={"messages", "viewed_images"}).items()
        if value not in (None, [], {})
    }
    if state.viewed_images:
        brief["viewed_images"] = sorted(state.viewed_images)
    if state.summary_text:
        brief["summary_text"] = _shorten(state.summary_text, 200)
    brief["messages"] = [
        {
            "type": message.type,
            **({"name": message.name} if message.name else {}),
            "text": _shorten(message_text(message), 200),
            **(
                {"tool_calls": [call["name"] for call in message.tool_calls]}
                if isinstance(message, AIMessage) and message.tool_calls
                else {}
            ),
        }
        for message in state.messages
    ]
    return brief
