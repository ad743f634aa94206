"""The Temporal worker: the run workflow plus every activity, wired to this process's config."""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleUpdate,
)
from temporalio.common import QueryRejectCondition, VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import UnsandboxedWorkflowRunner, Worker, WorkerDeploymentConfig

from activities.configured_tools.activities import ConfiguredToolActivities, build_tools
from activities.configured_tools.build import ToolBuildError
from activities.guardrails import GuardrailActivities
from activities.images import ImageActivities
from activities.llm_breaker import LlmBreakerActivities
from activities.mcp.activities import McpActivities
from activities.memory_queue import MemoryQueueActivities
from activities.memory_store import MemoryActivities
from activities.model import ModelActivities
from activities.run_archive import RunArchiveActivities
from activities.run_close import RunCloseActivities
from activities.sandbox.base import SandboxProvider
from activities.sandbox.kubernetes import KubernetesSandboxProvider
from activities.sandbox.local import LocalSandboxProvider
from activities.sandbox_sweeper import SweeperActivities
from activities.skill_catalog import SkillActivities
from activities.storage import ObjectStore
from activities.thread_data import ThreadDataActivities
from activities.thread_files import ThreadFiles
from activities.thread_queue import run_closed
from activities.thread_store import ObjectThreadStore, ThreadStore, ThreadStoreActivities
from activities.tool_output import ToolOutputActivities
from activities.tools import ToolActivities
from activities.uploads import UploadActivities
from activities.webhooks import WebhookActivities
from workers import telemetry
from workers.config import ConfigError, HartflowConfig, open_object_store
from workers.determinism import check_extensions
from workers.models import check_worker_models
from workers.payloads import data_converter_for
from workers.schedules.fire import ScheduleFireActivities
from workflows.circuit_breaker import CircuitBreakerWorkflow
from workflows.memory import MemoryWorkflow
from workflows.oneshot import OneShotWorkflow
from workflows.run import RunWorkflow
from workflows.run.subagent import SubagentWorkflow
from workflows.sandbox_sweeper import SandboxSweeperWorkflow, SweepInput
from workflows.schedule_fire import ScheduleFireWorkflow
from workflows.thread_queue import ThreadQueueWorkflow
from workflows.webhook import WebhookWorkflow

GRACEFUL_SHUTDOWN = timedelta(seconds=5)
"""How long a stopping worker lets its activities finish before the SDK cancels them."""

WORKFLOWS: Sequence[type] = (
    RunWorkflow,
    SubagentWorkflow,
    CircuitBreakerWorkflow,
    SandboxSweeperWorkflow,
    MemoryWorkflow,
    OneShotWorkflow,
    WebhookWorkflow,
    ScheduleFireWorkflow,
    ThreadQueueWorkflow,
)


def workflow_runner() -> UnsandboxedWorkflowRunner:
    """Workflows run outside the SDK's import sandbox. The sandbox re-imports every module a run needs into that
    run and proxies the standard library to refuse nondeterministic calls. Our deterministic packages
    (vocabulary/, workflows/, middlewares/) had to be passed through it (re-imported for every run they cost
    ~0.5 s of CPU and ~5 MB per run: 20 runs started together took 3x as long, ``bench/throughput.py``), and
    passed-through code is not checked at run time: the sandbox guarded none of our code and still cost ~3.5 ms
    of CPU a turn in its serialization-context lookups alone (``python -m bench.cpu_profile``;
    docs/performance.md). What guards determinism instead is ``workers/determinism.py``: the tests apply it to our
    workflow code, the worker to every ``run.extensions`` module before it starts; and the replay tests replay
    committed histories."""
    return UnsandboxedWorkflowRunner()


async def connect(config: HartflowConfig, address: str | None = None, *, serve_metrics: bool = False) -> Client:
    """A client for ``config``. ``serve_metrics``: this process runs a long-lived worker, whose SDK metrics it
    serves for Prometheus when ``telemetry.prometheus_bind`` is set (short commands leave the port alone)."""
    target = address or config.temporal.address or f"127.0.0.1:{config.temporal.embedded_port}"
    return await Client.connect(
        target,
        namespace=config.temporal.namespace,
        data_converter=data_converter_for(config),
        # A closed run is never replayed to answer a query: the server refuses, and clients read its archive
        # (workers/client/reader.py).
        default_workflow_query_reject_condition=QueryRejectCondition.NOT_OPEN,
        # Workers built from this client inherit its plugins: traces cover the worker's side too.
        plugins=telemetry.client_plugins(config.telemetry),
        runtime=telemetry.runtime(config.telemetry, serve_metrics=serve_metrics),
    )


def thread_store(config: HartflowConfig, objects: ObjectStore | None = None) -> ThreadStore:
    """The thread store on the configured backend (or on ``objects``, the worker's one store instance)."""
    return ObjectThreadStore(objects or open_object_store(config), config.storage.kept_versions)


def sandbox_provider(config: HartflowConfig) -> SandboxProvider:
    sandbox = config.sandbox
    if sandbox.provider == "kubernetes":
        return KubernetesSandboxProvider(sandbox.kubernetes, bash_timeout=sandbox.bash_timeout_seconds)
    local = LocalSandboxProvider(
        config.home, allow_host_bash=sandbox.allow_host_bash, bash_timeout=sandbox.bash_timeout_seconds
    )
    local.kill_orphaned_commands()  # a worker killed on this home mid-command left them, before this one polls
    return local


def _sweeper_activities(provider: SandboxProvider) -> list[Any]:
    if not isinstance(provider, KubernetesSandboxProvider):
        return []  # local sandboxes are the thread's folders: nothing outlives a run
    sweeper = SweeperActivities(provider)
    return [sweeper.inventory, sweeper.run_states]


def configured_tools(config: HartflowConfig) -> ConfiguredToolActivities:
    """The ``tools:`` entries built with this worker's environment (``$VAR`` settings resolved here only)."""
    try:
        return ConfiguredToolActivities(build_tools(config.tools, os.environ))
    except ToolBuildError as exc:
        raise ConfigError(f"invalid tools list: {exc}") from None


def activities(config: HartflowConfig, objects: ObjectStore) -> list[Any]:
    """Every activity, wired to ``objects``: the worker's one (thread-safe) instance of the configured storage."""
    provider = sandbox_provider(config)
    configured = configured_tools(config)
    store = ThreadStoreActivities(thread_store(config, objects))
    archives = RunArchiveActivities(objects)
    memory = MemoryActivities(objects)
    files = ThreadFiles(objects, config.home, exclude=frozenset(config.storage.sync_exclude))
    images = ImageActivities(files)
    tools = ToolActivities(provider, files=files)
    mcp = McpActivities(config.mcp.enabled(), files=files, objects=objects)  # one session pool per worker process
    breaker = LlmBreakerActivities()  # one per process: its checks share what it keeps of the breaker
    return [
        store.load,
        store.commit,
        archives.archive,
        RunCloseActivities(store, archives).close,
        ModelActivities(objects, config.models, os.environ, breaker_closed=breaker.closed_without_failures).invoke,
        breaker.check,
        breaker.report,
        tools.execute,
        tools.acquire,
        tools.file_hash,
        tools.release,
        mcp.list_tools,
        mcp.call_tool,
        configured.describe,
        configured.call,
        GuardrailActivities().evaluate,
        ToolOutputActivities(files).externalize,
        ThreadDataActivities(config.home).ensure_dirs,
        UploadActivities(files).list_uploads,
        memory.load,
        memory.read,
        memory.save,
        MemoryQueueActivities().enqueue,
        images.inspect,
        images.load,
        *_skill_activities(config, objects),
        WebhookActivities(config.webhooks.signing_secret(os.environ), config.webhooks.networks()).deliver,
        run_closed,
        *_sweeper_activities(provider),
        ScheduleFireActivities(config).fire,
    ]


def _skill_activities(config: HartflowConfig, objects: ObjectStore) -> list[Any]:
    skills = SkillActivities(config.skills.root(config.home), config.skills, objects)
    return [skills.load, skills.tool_policy]


def build_worker(client: Client, config: HartflowConfig, *, task_queue: str | None = None, **options: Any) -> Worker:
    """A worker for ``config``. Checks the models, the extension middlewares and the storage first: a model it
    cannot build or an extension that is not deterministic workflow code raises ``ConfigError``, a wrong
    endpoint, bucket or secret ``StorageConfigError``, naming the setting here, at start, instead of failing
    every run later."""
    check_worker_models(config)
    check_extensions(config.run.extensions)
    objects = open_object_store(config)
    objects.check()
    served = options.pop("activities", None)  # a test's own list (one activity held, say); else every activity
    return Worker(
        client,
        task_queue=task_queue or config.temporal.task_queue,
        workflows=list(WORKFLOWS),
        activities=served if served is not None else activities(config, objects),
        activity_executor=concurrent.futures.ThreadPoolExecutor(max_workers=16),
        workflow_runner=workflow_runner(),
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=config.temporal.sticky_queue_timeout_seconds),
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
        deployment_config=deployment_config(config),
        **{**config.temporal.worker.worker_options(), **options},
    )


def deployment_config(config: HartflowConfig) -> WorkerDeploymentConfig | None:
    """Worker Deployment versioning when the config names a build id (in Kubernetes: the image tag).

    Runs may wait days for an answer, so they move to the current version at their next workflow task
    (auto-upgrade) rather than pinning old workers alive; a change that breaks replay needs ``workflow.patched``.
    """
    temporal = config.temporal
    if not temporal.build_id:
        return None
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(deployment_name=temporal.deployment_name, build_id=temporal.build_id),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
    )


SWEEPER_SCHEDULE_PREFIX = "hartflow-sandbox-sweeper-"


async def ensure_sweeper_schedule(client: Client, config: HartflowConfig) -> str | None:
    """Create (or bring up to date) the Schedule that runs the sandbox sweeper; one per task queue.

    Every worker calls this at start, so the schedule follows the deployed config. ``None`` without
    Kubernetes sandboxes.
    """
    if config.sandbox.provider != "kubernetes":
        return None
    settings, task_queue = config.sandbox.kubernetes, config.temporal.task_queue
    schedule_id = f"{SWEEPER_SCHEDULE_PREFIX}{task_queue}"
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(
            SandboxSweeperWorkflow.run,
            SweepInput(max_age_seconds=settings.max_age_seconds),
            id=schedule_id,
            task_queue=task_queue,
            static_summary=f"sweep sandbox pods in {settings.namespace}",
        ),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(seconds=settings.sweep_interval_seconds))]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )
    try:
        await client.create_schedule(schedule_id, schedule)
    except ScheduleAlreadyRunningError:
        await client.get_schedule_handle(schedule_id).update(lambda _: ScheduleUpdate(schedule=schedule))
    return schedule_id
