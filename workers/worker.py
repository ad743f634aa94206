"""The Temporal worker: the run workflow plus every activity, wired to this process's config."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.model import ModelActivities
from activities.sandbox.local import LocalSandboxProvider
from activities.thread_store import FilesystemThreadStore, ThreadStore, ThreadStoreActivities
from activities.tools import ToolActivities
from workers.config import HartflowConfig
from workflows.run import RunWorkflow

# langchain_core subclasses classes the sandbox restricts (http.client), so it must be passed through;
# it is import-time pure, and passing it through also saves re-importing it for every workflow run.
PASSTHROUGH_MODULES = ("langchain_core", "langsmith", "yaml")

WORKFLOWS: Sequence[type] = (RunWorkflow,)


def workflow_runner() -> SandboxedWorkflowRunner:
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    )


async def connect(config: HartflowConfig, address: str | None = None) -> Client:
    target = address or config.temporal.address or f"127.0.0.1:{config.temporal.embedded_port}"
    return await Client.connect(target, namespace=config.temporal.namespace, data_converter=pydantic_data_converter)


def thread_store(config: HartflowConfig) -> ThreadStore:
    return FilesystemThreadStore(config.home)


def activities(config: HartflowConfig) -> list[Any]:
    provider = LocalSandboxProvider(
        config.home,
        allow_host_bash=config.sandbox.allow_host_bash,
        bash_timeout=config.sandbox.bash_timeout_seconds,
    )
    store = ThreadStoreActivities(thread_store(config))
    tools = ToolActivities(provider)
    return [store.load, store.commit, ModelActivities().invoke, tools.execute, tools.release]


def build_worker(client: Client, config: HartflowConfig, *, task_queue: str | None = None, **options: Any) -> Worker:
    return Worker(
        client,
        task_queue=task_queue or config.temporal.task_queue,
        workflows=list(WORKFLOWS),
        activities=activities(config),
        activity_executor=concurrent.futures.ThreadPoolExecutor(max_workers=16),
        workflow_runner=workflow_runner(),
        # A worker that dies is replaced quickly: its sticky queue is abandoned after 3 s, not 10 s.
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=3),
        graceful_shutdown_timeout=timedelta(seconds=5),
        **options,
    )
