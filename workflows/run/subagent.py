"""The subagent workflow: a lead run's ``task`` call, run as a child workflow of that run (``HartflowSubagent``).

It is the run workflow with the subagent profile (``workflows/run/profile.py`` lists the differences: its chain
and catalog, its own state never loaded from nor committed to the thread, no MCP tools, usage summed from its
messages). The lead starts it (``workflows/run/delegate.py``) with ``recursion_limit`` = the subagent type's
``max_turns`` and waits for its ``RunView``.
"""

from __future__ import annotations

from typing import ClassVar

from temporalio import workflow

from workflows.run.delegation import SUBAGENT_WORKFLOW_NAME
from workflows.run.io import RunInput, RunView
from workflows.run.profile import SUBAGENT, RunProfile
from workflows.run.workflow import RunWorkflow


@workflow.defn(name=SUBAGENT_WORKFLOW_NAME)
class SubagentWorkflow(RunWorkflow):
    profile: ClassVar[RunProfile] = SUBAGENT

    @workflow.run
    async def run(self, input: RunInput) -> RunView:
        # The SDK requires each workflow class to declare its own run method: this one is the lead's.
        return await super().run(input)
