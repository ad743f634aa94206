"""Recovery time: a worker killed (SIGKILL) in the middle of a tool call → the run completed, per heartbeat timeout.

Two ``hartflow worker`` processes poll the task queue. The run's one tool call is a bash command that, on its
first attempt only, writes the pids of its worker and its shell to a marker file and then hangs; the bench waits
for the marker, kills that worker's whole process group, and measures until the run's completion event. The
other worker takes over once the tool activity's heartbeat timeout expires (``run.tool_call.heartbeat_seconds``)
and Temporal retries it; the retried attempt finds the marker and returns at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType

from bench import hartflow_side
from bench.common import BenchContext, unique
from bench.workload import FINAL_ANSWER, PROMPT, WORKSPACE, write_script
from workers.testing.history import chain_histories
from workers.worker import connect

MARKER = "recovery-marker"
HANG_SECONDS = 600


def _script() -> list[dict[str, Any]]:
    command = (
        f"if [ ! -f {WORKSPACE}/{MARKER} ]; then echo $PPID $$ > {WORKSPACE}/{MARKER}; sleep {HANG_SECONDS}; fi; "
        "echo recovered"
    )
    return [
        {
            "content": "",
            "tool_calls": [{"name": "bash", "args": {"command": command}, "id": "call_hang"}],
            "response_metadata": {"finish_reason": "tool_calls"},
        },
        {"content": FINAL_ANSWER, "response_metadata": {"finish_reason": "stop"}},
    ]


async def _wait_for_file(path: Path, timeout: float) -> str:
    """The file's content once it has some (the tool writes it; there is no event to wait on from outside)."""
    async with asyncio.timeout(timeout):
        while not (path.exists() and path.read_text().strip()):
            await asyncio.sleep(0.02)
    return path.read_text()


async def measure(ctx: BenchContext, heartbeat_seconds: int) -> dict[str, Any]:
    task_queue = unique("bench-recovery")
    home = ctx.workdir / unique("home")
    config = hartflow_side.bench_config(
        home,
        ctx.address,
        task_queue,
        turns=1,
        tool_heartbeat_seconds=heartbeat_seconds,
        sticky_queue_timeout_seconds=ctx.sticky_queue_timeout_seconds,
    )
    model = write_script(ctx.workdir, _script(), "recovery")
    client = await connect(config)
    thread = unique("recovery")
    marker = home / "users" / config.user_id / "threads" / thread / "user-data" / "workspace" / MARKER
    with hartflow_side.worker_processes(config, ctx.workdir / f"{task_queue}.yaml", count=2) as workers:
        handle = await hartflow_side.start_run(client, config, thread, model, PROMPT)
        worker_pid, shell_pid = (int(pid) for pid in (await _wait_for_file(marker, 120)).split())
        doomed = next(process for process in workers if process.pid == worker_pid)
        killed_at = datetime.now(UTC)
        os.killpg(doomed.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):  # the hanging shell, should it sit in another group
            os.kill(shell_pid, signal.SIGKILL)
        doomed.wait(timeout=30)
        view = await handle.result()
    if view.status != "completed" or view.final_message != FINAL_ANSWER:
        raise RuntimeError(f"recovery run {thread} ended {view.status}")
    histories = await chain_histories(client, handle.id, handle.result_run_id or "")
    completed = next(
        event.event_time.ToDatetime(tzinfo=UTC)
        for event in histories[-1]
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
    )
    return {
        "heartbeat_timeout_s": heartbeat_seconds,
        "recovery_s": round((completed - killed_at).total_seconds(), 2),
        "sticky_queue_timeout_seconds": config.temporal.sticky_queue_timeout_seconds,
    }


async def run(ctx: BenchContext, heartbeat_timeouts: list[int]) -> dict[str, Any]:
    return {"rows": [await measure(ctx, seconds) for seconds in heartbeat_timeouts]}
