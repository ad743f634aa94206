"""The subagent workflow: a lead run's ``task`` call, run as a child workflow of that run (``HartflowSubagent``).

It is the run workflow with four differences, made by overriding rather than by touching the loop:

* the chain is the subagent chain (``build_subagent_chain``, DeerFlow's subagent segment) and the catalog has neither
  ``ask_clarification`` (no Clarification: a subagent cannot ask the user) nor ``task`` (no recursion);
* its state is its own: one message list seeded with the task's prompt, never loaded from or committed to the
  thread (no thread commit, no Memory). It shares the thread's files and the lead run's sandbox id, which the
  lead releases;
* it has no MCP tools (the lead run's are not passed down yet);
* its status reports the token usage of its model calls (it has no TokenUsage middleware), which the lead adds
  to the dispatching AIMessage through the task result.

The lead starts it with ``recursion_limit`` = the subagent type's ``max_turns`` and waits for its ``RunView``.
"""

from __future__ import annotations

from langchain_core.messages import HumanMessage
from temporalio import workflow

from middlewares.chain import build_subagent_chain
from vocabulary.state import ThreadState
from vocabulary.tools import ToolCatalog
from workflows.run.delegation import SUBAGENT_WORKFLOW_NAME, usage_of
from workflows.run.io import RunInput, RunView
from workflows.run.workflow import RunWorkflow


@workflow.defn(name=SUBAGENT_WORKFLOW_NAME)
class SubagentWorkflow(RunWorkflow):
    @workflow.init
    def __init__(self, input: RunInput) -> None:
        super().__init__(input)
        self._ctx.is_subagent = True
        self._chain = build_subagent_chain(input.settings)
        self._catalog = ToolCatalog.builtin(exclude=frozenset({"ask_clarification"})).with_tools(
            tool for mw in self._chain for tool in mw.tools()
        )

    @workflow.run
    async def run(self, input: RunInput) -> RunView:
        return await super().run(input)

    async def _add_mcp_tools(self, input: RunInput) -> None:
        """Subagents get no MCP tools yet: the lead's discovery is not shared with them."""

    async def _start(self, input: RunInput) -> None:
        if input.carried is not None:
            await super()._start(input)
            return
        task = input.subagent
        sandbox = {"sandbox_id": task.sandbox_id} if task is not None and task.sandbox_id else None
        self._state = ThreadState(sandbox=sandbox)
        self._apply({"messages": [HumanMessage(content=input.message, id=self._ctx.uuid())]})

    async def _commit(self) -> None:
        """Nothing to commit: the subagent's messages are its own, and its answer goes back as the task result."""

    def _view(self) -> RunView:
        view = super()._view()
        view.usage = usage_of(self._state.messages)
        return view
