"""The sandbox sweeper's activities: which sandbox pods exist, and whether the runs that acquired them are open.

Deleting is not here: the sweeper calls ``sandbox.release`` (:meth:`ToolActivities.release`), the same
idempotent path as a run's compensation.
"""

from __future__ import annotations

import asyncio
from typing import Literal

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from activities.contract import implements
from activities.sandbox.kubernetes import KubernetesSandboxProvider
from vocabulary.contracts import SANDBOX_INVENTORY, SANDBOX_RUN_STATES, RunStates, RunStatesInput, SandboxInventory

RunState = Literal["running", "closed", "missing"]


async def run_state(client: Client, workflow_id: str) -> RunState:
    """Whether the latest execution of ``workflow_id`` is running, has closed, or never existed."""
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return "missing"
        raise
    return "running" if description.status == WorkflowExecutionStatus.RUNNING else "closed"


class SweeperActivities:
    def __init__(self, provider: KubernetesSandboxProvider) -> None:
        self._provider = provider

    @implements(SANDBOX_INVENTORY)
    async def inventory(self) -> SandboxInventory:
        return SandboxInventory(await asyncio.to_thread(self._provider.inventory))

    @implements(SANDBOX_RUN_STATES)
    async def run_states(self, input: RunStatesInput) -> RunStates:
        client = activity.client()
        states = await asyncio.gather(*(run_state(client, workflow_id) for workflow_id in input.workflow_ids))
        return RunStates(dict(zip(input.workflow_ids, states, strict=True)))
