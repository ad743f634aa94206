"""Two upgrades of the run workflow for tests/test_upgrade_safety.py, both registered as ``HartflowRun``: each
runs one new activity right after the thread state is loaded — one guarded by ``workflow.patched`` as the
README's procedure says, one not. In their own module (with workflow-safe imports only), so the sandboxed
workflow runner can load them the way it loads the real workflow."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from workflows.run import WORKFLOW_NAME, RunInput, RunView, RunWorkflow

NEW_STEP_ACTIVITY = "test.new_step"
NEW_STEP_PATCH = "test-new-step"


async def _new_step() -> None:
    await workflow.execute_activity(NEW_STEP_ACTIVITY, start_to_close_timeout=timedelta(seconds=30))


@workflow.defn(name=WORKFLOW_NAME)
class PatchedRunWorkflow(RunWorkflow):
    """The upgrade done right: runs started before it replay the old path; new runs take the new step."""

    @workflow.run
    async def run(self, input: RunInput) -> RunView:
        return await super().run(input)

    async def _start(self, input: RunInput) -> None:
        await super()._start(input)
        if workflow.patched(NEW_STEP_PATCH):
            await _new_step()


@workflow.defn(name=WORKFLOW_NAME)
class UnpatchedRunWorkflow(RunWorkflow):
    """The same upgrade shipped without the patch: replaying a run started before it is nondeterministic."""

    @workflow.run
    async def run(self, input: RunInput) -> RunView:
        return await super().run(input)

    async def _start(self, input: RunInput) -> None:
        await super()._start(input)
        await _new_step()
