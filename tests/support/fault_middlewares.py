"""Test middlewares for fault tests, loaded into runs through ``run.extensions`` (``module:Class``, zero-arg)."""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

from middlewares.base import Middleware
from middlewares.context import ActivityOptions, RunContext
from middlewares.sandbox import state_sandbox_id
from vocabulary.contracts import TOOL_EXECUTE, ToolCallInput, ToolCallOutput
from vocabulary.state import StateUpdate, ThreadState

AFTER_AGENT_STARTED = "after-agent-started"
"""Created in the sandbox's workspace by the first attempt of the after_agent work, which then hangs."""
AFTER_AGENT_LOG = "after-agent.log"
"""One line per attempt of the after_agent work that finished."""


class HangingAfterAgent(Middleware):
    """after_agent: one bash command in the thread's sandbox (a ``tool.execute`` activity), like a hook that
    archives outputs. Its first attempt marks the workspace and hangs until the sandbox goes away, so a test can
    kill the worker in the middle of after_agent; a retried attempt finds the mark and finishes at once.

    It is an extension, so its after_agent runs before Sandbox's (after_* run in reverse chain order): the
    release comes after it.
    """

    async def after_agent(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        command = (
            f"if [ -f {AFTER_AGENT_STARTED} ]; then echo done >> {AFTER_AGENT_LOG}; "
            f"else touch {AFTER_AGENT_STARTED}; sleep 600; fi"
        )
        tool_calls = ctx.tool_calls.options
        await ctx.call(
            TOOL_EXECUTE,
            ToolCallInput(
                ctx.thread,
                {"name": "bash", "args": {"command": command}, "id": "after-agent"},
                sandbox_id=state_sandbox_id(state),  # the run's first tool call wrote it there
                run_key=ctx.workflow_id,
            ),
            result_type=ToolCallOutput,
            summary="HangingAfterAgent.after_agent · bash",
            options=ActivityOptions(
                start_to_close=tool_calls.start_to_close,
                heartbeat=tool_calls.heartbeat,
                retry=RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=3),
            ),
        )
        return None
