"""The Temporal floor: a bare workflow doing one model activity and one tool activity per turn.

No middleware, no state, no persistence: what any durable agent on Temporal pays at least. The model activity
returns the workload's canned response for the turn (an AIMessage-like dict), the tool activity lists the same
kind of empty directory the other systems list. Same dev server, data converter and worker options as hartflow's
worker (its workflow runner, 16 activity threads, the same sticky-queue timeout).
"""

from __future__ import annotations

import concurrent.futures
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

from bench.workload import responses
from workers.config import TemporalSettings
from workers.worker import workflow_runner

MODEL_ACTIVITY = "floor.model"
TOOL_ACTIVITY = "floor.tool"


@dataclass
class FloorInput:
    turns: int
    run_tag: str


@dataclass
class ModelTurn:
    turns: int
    run_tag: str
    turn: int


class FloorActivities:
    def __init__(self, workspace: str) -> None:
        self._workspace = workspace

    @activity.defn(name=MODEL_ACTIVITY)
    async def model(self, request: ModelTurn) -> dict[str, Any]:
        return responses(request.turns, request.run_tag)[request.turn]

    @activity.defn(name=TOOL_ACTIVITY)
    async def tool(self, args: dict[str, Any]) -> str:
        entries = sorted(os.listdir(self._workspace))
        return "\n".join(entries) if entries else "(empty)"


@workflow.defn(name="BenchFloor")
class FloorWorkflow:
    @workflow.run
    async def run(self, input: FloorInput) -> str:
        turn = 0
        while True:
            message: dict[str, Any] = await workflow.execute_activity(
                MODEL_ACTIVITY,
                ModelTurn(input.turns, input.run_tag, turn),
                result_type=dict,
                start_to_close_timeout=timedelta(seconds=600),
            )
            turn += 1
            if not message.get("tool_calls"):
                return str(message["content"])
            for call in message["tool_calls"]:
                await workflow.execute_activity(
                    TOOL_ACTIVITY, call["args"], result_type=str, start_to_close_timeout=timedelta(seconds=900)
                )


def floor_worker(client: Client, task_queue: str, workspace: str) -> Worker:
    activities = FloorActivities(workspace)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[FloorWorkflow],
        activities=[activities.model, activities.tool],
        activity_executor=concurrent.futures.ThreadPoolExecutor(max_workers=16),
        workflow_runner=workflow_runner(),
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=TemporalSettings().sticky_queue_timeout_seconds),
        graceful_shutdown_timeout=timedelta(seconds=5),
    )


async def _serve(address: str, task_queue: str, workspace: str) -> None:
    """Run a floor worker until SIGTERM: the throughput family's floor, in a process of its own like hartflow's."""
    import asyncio
    import signal

    from temporalio.contrib.pydantic import pydantic_data_converter

    client = await Client.connect(address, data_converter=pydantic_data_converter)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with floor_worker(client, task_queue, workspace):
        print("worker polling task queue", task_queue, flush=True)
        await stop.wait()


if __name__ == "__main__":
    import asyncio
    import sys

    if len(sys.argv) != 4:
        raise SystemExit("usage: python -m bench.floor ADDRESS TASK_QUEUE WORKSPACE")
    asyncio.run(_serve(*sys.argv[1:]))
