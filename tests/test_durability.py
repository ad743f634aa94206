"""A worker killed mid-run: another worker finishes the run, and no completed tool call runs again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml
from temporalio.client import Client

from tests.support import answer, calls, make_config, start_run, tool_call, write_script
from workers.config import HartflowConfig

REPO = Path(__file__).resolve().parents[1]


@contextmanager
def worker_process(config: HartflowConfig, config_file: Path) -> Iterator[subprocess.Popen[str]]:
    config_file.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_none=True)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARTFLOW_", "TEMPORAL_"))}
    process = subprocess.Popen(
        [sys.executable, "-m", "workers.cli", "worker", "--config", str(config_file)],
        env={**env, "PYTHONPATH": str(REPO)},
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # its own process group, so a kill takes its children too
    )
    try:
        assert process.stderr is not None
        for line in process.stderr:
            if "worker polling task queue" in line:
                break
        assert process.poll() is None, "the worker process exited"
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)


async def _wait_for(path: Path, timeout: float = 60) -> None:
    async def exists() -> None:
        while not path.exists():
            await asyncio.sleep(0.05)

    await asyncio.wait_for(exists(), timeout)


async def test_worker_killed_mid_tool_call_another_worker_finishes_without_rerunning_completed_tools(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    workspace = "/mnt/user-data/workspace"
    slow = (
        f"echo second-start >> {workspace}/log; "
        f"if [ ! -f {workspace}/marker ]; then touch {workspace}/marker; sleep 30; fi; "
        f"echo second-end >> {workspace}/log"
    )
    model = write_script(
        home,
        [
            calls(tool_call("bash", "fast", command=f"echo first >> {workspace}/log")),
            calls(tool_call("bash", "slow", command=slow)),
            answer("survived"),
        ],
    )
    with worker_process(config, home.parent / "worker.yaml") as doomed:
        handle = await start_run(client, config, "work", model=model, thread_id="t-kill")
        thread_dir = home / "users/default/threads/t-kill/user-data/workspace"
        await _wait_for(thread_dir / "marker")
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.wait(timeout=30)

    with worker_process(config, home.parent / "worker2.yaml"):
        final = await asyncio.wait_for(handle.result(), timeout=120)

    assert final.status == "completed" and final.final_message == "survived"
    log = (thread_dir / "log").read_text().split()
    assert log.count("first") == 1, "a tool call that completed before the crash ran again"
    assert log.count("second-start") == 2  # the in-flight call is retried (at least once)
    assert log.count("second-end") == 1
