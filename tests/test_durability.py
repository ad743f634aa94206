"""A worker killed mid-run: another worker finishes the run, and no completed tool call runs again."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client

from tests.support import start_run
from workers.testing import answer, calls, make_config, tool_call, write_script
from workers.testing.processes import kill_hard, wait_for_file, worker_process


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
        await wait_for_file(thread_dir / "marker")
        kill_hard(doomed)

    with worker_process(config, home.parent / "worker2.yaml"):
        final = await asyncio.wait_for(handle.result(), timeout=120)

    assert final.status == "completed" and final.final_message == "survived"
    log = (thread_dir / "log").read_text().split()
    assert log.count("first") == 1, "a tool call that completed before the crash ran again"
    assert log.count("second-start") == 2  # the in-flight call is retried (at least once)
    assert log.count("second-end") == 1
