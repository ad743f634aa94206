"""The closest durable peer: LangChain Deep Agents on Temporal (PyPI ``temporalio-deepagents``).

The agent loop runs inside a workflow (``create_temporal_deep_agent``), every model call is an activity answered
by the package's own ``testing.mock_model_provider`` with the workload's scripted responses, and the tool is a
Temporal activity exposed with ``activity_as_tool``. The plugin brings its own data converter, so this peer gets
its own client. Its tool is named ``workspace_ls``: Deep Agents ships a built-in ``ls`` over its in-state
filesystem (no activity), which would shadow the benchmark's tool.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from temporalio.deepagents import DeepAgentsPlugin, activity_as_tool, create_temporal_deep_agent
    from temporalio.deepagents.testing import mock_model_provider

    from bench.workload import PROMPT
    from workers.config import TemporalSettings

TOOL = "workspace_ls"
MODEL_NAME = "bench-scripted"
_WORKSPACE_ENV = "HARTFLOW_BENCH_DEEPAGENTS_WORKSPACE"


@dataclass
class DeepAgentInput:
    turns: int
    run_tag: str


@activity.defn(name=TOOL)
async def workspace_ls(path: str) -> str:
    """List the files in a directory."""
    entries = sorted(os.listdir(os.environ[_WORKSPACE_ENV]))
    return "\n".join(entries) if entries else "(empty)"


@workflow.defn(name="BenchDeepAgent")
class DeepAgentWorkflow:
    @workflow.run
    async def run(self, input: DeepAgentInput) -> str:
        agent = create_temporal_deep_agent(
            model=MODEL_NAME,
            tools=[activity_as_tool(workspace_ls, start_to_close_timeout=timedelta(seconds=900))],
            activity_options={"start_to_close_timeout": timedelta(seconds=600)},
        )
        result = await agent.ainvoke(
            {"messages": [{"role": "user", "content": PROMPT}]},
            config={"recursion_limit": 20 * (input.turns + 1) + 50},
        )
        return str(result["messages"][-1].content)


async def deepagents_client(address: str, scripted: Sequence[Any]) -> Client:
    """A client whose workers answer model calls from ``scripted`` (consumed in order, across runs)."""
    return await Client.connect(address, plugins=[DeepAgentsPlugin(model_provider=mock_model_provider(scripted))])


def deepagents_worker(client: Client, task_queue: str, workspace: str) -> Worker:
    os.environ[_WORKSPACE_ENV] = workspace
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[DeepAgentWorkflow],
        activities=[workspace_ls],
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=TemporalSettings().sticky_queue_timeout_seconds),
        graceful_shutdown_timeout=timedelta(seconds=5),
    )
