"""hartflow as the benchmarks drive it: only through its public surfaces, the way the CLI does.

Configs come from ``workers.config.load_config``, clients from ``workers.worker.connect`` (so whatever data
converter hartflow configures is used here too), workers from ``workers.worker.build_worker`` or the
``hartflow worker`` process, and runs are started, answered and awaited through ``workers.client.runs`` (as the CLI
and the API do) with a ``scripted:PATH`` model.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import yaml
from temporalio.client import Client, WorkflowHandle

from vocabulary.contracts import ThreadRef
from workers.client.runs import Runs, RunStart
from workers.config import HartflowConfig, load_config
from workers.worker import build_worker
from workers.worker_stop import running
from workflows.run import ReplyInput, RunView

REPO = Path(__file__).resolve().parents[1]

UNBOUNDED = 1_000_000
"""Loop-detection thresholds for the benchmark: the middleware still runs its checks on every turn, but N
identical ``ls`` calls are the workload here, not a loop to stop."""


def bench_config(
    home: Path,
    address: str,
    task_queue: str,
    *,
    turns: int,
    tool_heartbeat_seconds: int = 30,
    sticky_queue_timeout_seconds: float | None = None,
    stream_tokens: bool = False,
    worker_tuning: dict[str, Any] | None = None,
    **overrides: Any,
) -> HartflowConfig:
    """hartflow's default config (so the full default chain) on ``address``, allowed ``turns`` tool turns.
    ``stream_tokens``: the model calls publish live tokens (``run.model_call.stream_tokens``, on by default in
    hartflow); off unless asked, since no other system streams, and the per-turn family measures it on beside."""
    temporal: dict[str, Any] = {"address": address, "task_queue": task_queue, "worker": worker_tuning or {}}
    if sticky_queue_timeout_seconds is not None:
        temporal["sticky_queue_timeout_seconds"] = sticky_queue_timeout_seconds
    return load_config(
        overrides={
            "storage": {"home": str(home)},
            "temporal": temporal,
            "sandbox": {"allow_host_bash": True},
            "run": {
                "recursion_limit": turns + 10,
                "tool_call": {"heartbeat_seconds": tool_heartbeat_seconds},
                "model_call": {"stream_tokens": stream_tokens},
                "middlewares": {
                    "loop_detection": {
                        "warn_threshold": UNBOUNDED,
                        "hard_limit": UNBOUNDED,
                        "tool_freq_warn": UNBOUNDED,
                        "tool_freq_hard_limit": UNBOUNDED,
                    }
                },
            },
            **overrides,
        },
        environ={},
    )


@contextlib.asynccontextmanager
async def in_process_worker(client: Client, config: HartflowConfig) -> AsyncIterator[None]:
    async with running(build_worker(client, config)):
        yield


async def start_run(
    client: Client, config: HartflowConfig, thread_id: str, model: str, message: str
) -> WorkflowHandle[Any, RunView]:
    """Start a run exactly as ``hartflow run`` does (``workers/client/runs.py``: the same ids, search attributes,
    summary and details)."""
    return await Runs(client, config.temporal.task_queue).start(
        RunStart(ThreadRef(config.user_id, thread_id), message, model, config.run)
    )


async def wait_settled(client: Client, workflow_id: str) -> RunView:
    """Until the run pauses or ends (its ``wait_settled`` update)."""
    return await Runs(client).wait_settled(workflow_id)


async def reply(client: Client, workflow_id: str, answer: str) -> None:
    """Answer the pending clarification the way ``hartflow reply`` does (the validated ``reply`` update)."""
    await Runs(client).reply(workflow_id, ReplyInput(answer=answer))


def write_worker_config(config: HartflowConfig, path: Path) -> Path:
    path.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_none=True)), encoding="utf-8")
    return path


@contextlib.contextmanager
def worker_processes(
    config: HartflowConfig, config_file: Path, count: int = 1
) -> Iterator[list[subprocess.Popen[str]]]:
    """``count`` ``hartflow worker`` processes (started together; each in its own session, so a kill reaches its
    children), all polling when yielded."""
    write_worker_config(config, config_file)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARTFLOW_", "TEMPORAL_"))}
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "workers.cli", "worker", "--config", str(config_file)],
            env={**env, "PYTHONPATH": str(REPO)},
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,  # the SDK core's warnings (slow workflow tasks) would flood the table
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        for _ in range(count)
    ]
    try:
        for process in processes:
            assert process.stderr is not None
            for line in process.stderr:
                if "worker polling task queue" in line:
                    break
            if process.poll() is not None:
                raise RuntimeError(f"a hartflow worker exited with {process.returncode}")
            # Keep draining its stderr, so a chatty worker never blocks on a full pipe.
            threading.Thread(target=process.stderr.read, daemon=True).start()
        yield processes
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                # A worker busy with many runs can outlast its graceful shutdown; it must not outlive the bench.
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
