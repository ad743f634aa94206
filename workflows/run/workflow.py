"""The run workflow: one agent run on one thread, durable from the first hook to the last commit.

    discover configured and MCP tools (activities, once per run)
    load thread state (activity)
    before_agent                                   list order
    loop:
        before_model                               list order
        wrap_model_call chain → model activity     first middleware outermost
        after_model                                reverse order; jump_to="model" skips the tools
        tool calls, in parallel, each through the wrap_tool_call chain → tool activity
        a clarification interrupt → commit, pause until a reply (signal or update), continue
        (gated calls first wait, together, for their approvals the same way)
    after_agent                                    reverse order, in ``finally``: also on failure and cancel
    commit thread state, archive the run           (one activity; run_finished published once it is stored)
    start its webhook delivery                     (child workflow)

The workflow id is derived from the thread id, so Temporal itself guarantees one active run per thread.

This module is the run's lifecycle, its loop and its whole public surface (every update, signal and query, each a
one-liner). What the run changes is one :class:`RunFields`; its behaviour beside the loop is in collaborators that
take it as a parameter: its tools (``catalog.py``), the model turn (``model_call.py``), the tool turn
(``tools.py``) with delegation (``delegate.py``), the pause (``pause.py``) and approvals (``approval.py``),
visibility (``visibility.py``), the view (``view.py``), the thread's load and commit (``thread_io.py``), what
continue-as-new carries (``carry.py``), a subagent's live steps (``step_reports.py``) and the run's end
(``finish.py``: the final commit, the archive and the webhook). A subagent is this workflow with another profile
(``profile.py``).
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.exceptions import ApplicationError
from temporalio.workflow import HandlerUnfinishedPolicy

import workflows.run.carry as carry
import workflows.run.thread_io as thread_io
from middlewares import patches
from middlewares.chain import describe
from middlewares.context import TemporalRunContext
from vocabulary.approvals import ReviewInput
from vocabulary.contracts import LLM_RETRY_SIGNAL, LlmRetryNotice, ThreadRef
from workflows.run.approval import Approvals
from workflows.run.approval_relay import SUBAGENT_APPROVAL_SIGNAL, RelayedApprovals
from workflows.run.carry import STOP_RECURSION_LIMIT
from workflows.run.catalog import with_discovered_tools
from workflows.run.delegate import Delegation
from workflows.run.dispatcher import Dispatcher
from workflows.run.fields import RunFields
from workflows.run.finish import finish
from workflows.run.input_check import input_problem
from workflows.run.io import ReplyInput, RunInput, RunView
from workflows.run.model_call import ModelCall
from workflows.run.pause import STOP_CLARIFICATION_TIMEOUT, Pause
from workflows.run.profile import LEAD, RunProfile
from workflows.run.prompt import system_prompt
from workflows.run.state_stream import run_events
from workflows.run.step_reports import SUBAGENT_STEP_SIGNAL, StepReports, SubagentStep, record_step
from workflows.run.tools import ToolTurn
from workflows.run.view import run_view, state_brief
from workflows.run.visibility import Visibility

__all__ = ["STOP_CLARIFICATION_TIMEOUT", "STOP_RECURSION_LIMIT", "WORKFLOW_NAME", "RunWorkflow"]

WORKFLOW_NAME = "HartflowRun"


@workflow.defn(name=WORKFLOW_NAME)
class RunWorkflow:
    """A lead run; :class:`~workflows.run.subagent.SubagentWorkflow` is the same class with the subagent profile."""

    profile: ClassVar[RunProfile] = LEAD

    @workflow.init
    def __init__(self, input: RunInput) -> None:
        info = workflow.info()
        settings = input.settings
        self._input = input
        self._fields = fields = RunFields(progress=carry.progress(input.carried))
        # The run's workflow stream (progress events, thread state): the SDK requires building it in __init__.
        prior = input.carried.stream if input.carried is not None else None
        self._stream = WorkflowStream(prior_state=prior)
        events = run_events(self._stream, prior, lambda: fields.state)
        self._ctx = TemporalRunContext(
            thread=ThreadRef(input.user_id, input.thread_id),
            run_id=info.first_execution_run_id,
            workflow_id=info.workflow_id,
            model=input.model,
            model_calls=settings.model_call_policy(),
            tool_calls=settings.tool_call_policy(),
            capabilities=settings.model_capabilities,
            is_subagent=self.profile.is_subagent,
            progress=fields.progress,
            events=events,
        )
        self._chain = self.profile.build_chain(settings, ())
        self._catalog = self.profile.catalog(settings, self._chain)
        self._visibility = Visibility(self._ctx, fields)
        self._pause = Pause(self._ctx, fields, self._visibility, timeout=settings.clarification_timeout)
        self._approvals = Approvals(self._ctx, fields, self._visibility, self._pause, self._tool_schemas)
        self._commit_lock = asyncio.Lock()  # a subagent's approval commits while the run's own turn goes on
        self._relayed = RelayedApprovals(self._ctx, fields, self._visibility, self._commit)
        # A custom agent's SOUL is the lead's: DeerFlow's subagents get their own prompt, without it.
        prompt = system_prompt(None if self.profile.is_subagent else settings.soul)
        self._model_call = ModelCall(self._ctx, fields, self._visibility, prompt)
        carried = input.carried.state.messages if input.carried is not None else ()
        self._steps = StepReports(self._ctx, input.subagent, input.model, carried=carried)

    # -- handlers: what clients may ask and tell a run ----------------------------------------------------

    @workflow.update(
        name="reply",
        description="Answer the pending clarification (validated; rejected replies leave no history).",
    )
    async def reply(self, answer: ReplyInput) -> RunView:
        self._pause.reply(answer)
        return self._view()

    @reply.validator
    def _validate_reply(self, answer: ReplyInput) -> None:
        self._pause.validate(answer)

    @workflow.signal(
        name="clarification_reply",
        description='Answer the pending clarification: a string, or {"answer", "option_id", "fields", "request_id"}.',
    )
    def clarification_reply(self, payload: Any) -> None:
        self._pause.signal(payload)

    @workflow.update(
        name="review",
        description="Decide on the pending tool approval: approve, edit or reject (validated; refused: no history).",
    )
    async def review(self, review: ReviewInput) -> RunView:
        await self._approvals.review(review)
        return self._view()

    @review.validator
    def _validate_review(self, review: ReviewInput) -> None:
        self._approvals.validate(review)

    @workflow.signal(
        name="approval_review",
        description='Decide on the pending tool approval: {"decisions": [{"type": "approve"}, ...], "call_ids"?}.',
    )
    async def approval_review(self, payload: Any) -> None:
        await self._approvals.signal(payload)

    @workflow.signal(
        name=SUBAGENT_APPROVAL_SIGNAL,
        description="A subagent of this run asks for (or got) a tool approval: this run shows it as its own.",
    )
    async def subagent_approval(self, request: Any) -> None:
        await self._relayed.received(request)

    @workflow.signal(
        name=LLM_RETRY_SIGNAL,
        description="A model.invoke attempt failed and Temporal will retry it (recorded as an llm_retry event).",
    )
    def llm_retry(self, notice: LlmRetryNotice) -> None:
        self._model_call.retrying(notice)

    @workflow.signal(
        name=SUBAGENT_STEP_SIGNAL,
        description="A subagent of this run took a step (an answer, a tool result): a task_running event.",
    )
    def subagent_step(self, step: SubagentStep) -> None:
        record_step(self._ctx, step)

    @workflow.update(
        name="wait_settled",
        description="Returns once the run is waiting for input or has ended.",
        # A waiter is abandoned on continue-as-new; the client asks the continued run again.
        unfinished_policy=HandlerUnfinishedPolicy.ABANDON,
    )
    async def wait_settled(self) -> RunView:
        await workflow.wait_condition(lambda: self._fields.status != "running")
        return self._view()

    @workflow.query(name="status", description="The run: status, stop reason, turns, pending question.")
    def status(self) -> RunView:
        return self._view()

    @workflow.query(name="pending_input", description="The pending human_input_request payload, or null.")
    def pending_input(self) -> dict[str, Any] | None:
        return self._fields.pending

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
        return state_brief(self._fields.state)

    # -- the run ------------------------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: RunInput) -> RunView:
        ctx, fields = self._ctx, self._fields
        ctx.take_patch_baseline()
        problem = input_problem(input) if input.carried is None else None
        # Only a refused input takes the patch: valid runs, and their histories, are unchanged by it.
        if problem is not None and ctx.patched(patches.INPUT_CHECK):
            raise ApplicationError(problem, type="BadInput", non_retryable=True)
        self._chain, self._catalog = await with_discovered_tools(
            ctx, input, fields, self.profile, self._chain, self._catalog
        )
        dispatcher = Dispatcher(self._chain, ctx, fields.merge_messages)
        delegation = Delegation(ctx, fields, self._visibility, input.settings)
        tools = ToolTurn(
            ctx,
            fields,
            self._catalog,
            visibility=self._visibility,
            delegation=delegation,
            pause=self._pause,
            approvals=self._approvals,
            commit=self._commit,
        )
        if input.carried is None:
            workflow.logger.info("run %s starts with chain: %s", ctx.run_id, " → ".join(describe(self._chain)))
        await self._start(input)
        self._visibility.sync_search_attributes()
        failure: Exception | asyncio.CancelledError | None = None
        try:
            if input.carried is None:
                fields.state = (await dispatcher.before_agent(fields.state)).state
            await self._loop(dispatcher, tools)
        except (Exception, asyncio.CancelledError) as exc:
            # A failure or a cancellation: after_agent is the compensation. Nothing wider: the SDK tears a run
            # down with BaseExceptions (eviction, GeneratorExit when an orphaned coroutine is collected), and a
            # run that swallowed one would go on issuing commands in whichever run owns the thread then.
            failure = exc
        if failure is None and fields.continue_as_new_requested:
            # Release the stream's waiting subscribers (new ones retry until the continued run answers).
            self._stream.detach_pollers()
            await self._commit()
            carry.continue_as_new(input, fields, self._chain, self._stream.get_state())
        self._approvals.abandon()
        try:
            fields.state = (await dispatcher.after_agent(fields.state)).state
        except Exception as exc:
            workflow.logger.error("after_agent failed: %s", exc)
            failure = failure or exc
        return await finish(
            ctx,
            fields,
            self.profile,
            self._commit_lock,
            self._visibility,
            self._stream,
            input.webhook,
            self._view,
            failure,
        )

    async def _start(self, input: RunInput) -> None:
        await thread_io.start(input, self._fields, self._ctx, self._chain, self.profile)

    async def _loop(self, dispatcher: Dispatcher, tools: ToolTurn) -> None:
        """The agent loop. It keeps the fields' state current after every step, so whatever ends the loop (an
        answer, a limit, a failure, a cancellation) leaves the latest state for after_agent and the commit."""
        fields = self._fields
        while not carry.out_of_turns(self._ctx, fields, self._input.settings.recursion_limit):
            before = await dispatcher.before_model(fields.state)
            fields.state = before.state
            if before.jump_to == "end":
                return
            await self._model_call.take_turn(dispatcher, self._catalog)
            after = await dispatcher.after_model(fields.state)
            fields.state = after.state
            await self._steps.report(fields.state)  # a subagent's answer, live in its lead's stream
            if after.jump_to == "model":
                continue
            if after.jump_to == "end":
                return
            goes_on = await tools.take_turn(dispatcher)
            await self._steps.report(fields.state)  # a subagent's tool results
            if not goes_on:
                return

    def _tool_schemas(self) -> dict[str, dict[str, Any]]:
        return {name: spec.parameters for name, spec in self._catalog.tools.items()}

    # -- ending -------------------------------------------------------------------------------------------

    async def _commit(self) -> None:
        async with self._commit_lock:
            await thread_io.commit(self._fields, self._ctx, self.profile)

    def _view(self) -> RunView:
        usage = self.profile.usage(self._chain, self._fields.state)
        return run_view(self._ctx, self._fields, self._chain, usage)
