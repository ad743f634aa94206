"""Record workflow histories for the replay test (tests/test_replay.py).

Run this whenever a workflow change is *released* (not for every change): it captures what runs of the
current code look like. Older histories stay in tests/histories/ so CI proves new code still replays them;
a change that cannot replay an old history needs `workflow.patched(...)` (see the README).

    .venv/bin/python scripts/record_histories.py --tag v3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from temporalio.client import Client, WorkflowHandle, WorkflowHistory  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402

from bench.hartflow_side import start_run  # noqa: E402
from workers.config import HartflowConfig  # noqa: E402
from workers.devserver import DevServer, free_port  # noqa: E402
from workers.devserver_options import DevServerOptions  # noqa: E402
from workers.payloads import client_for  # noqa: E402
from workers.testing import (  # noqa: E402
    answer,
    calls,
    make_config,
    running_worker,
    settle,
    tool_call,
    unique,
    write_script,
)
from workers.testing.processes import wait_for_file  # noqa: E402
from workflows.run import ReplyInput, RunView  # noqa: E402

OUT = REPO / "tests" / "histories"


async def _start(client: Client, config: HartflowConfig, message: str, model: str) -> WorkflowHandle[Any, RunView]:
    """A run on a thread of its own, started as ``hartflow run`` starts one, with the config's converter."""
    return await start_run(client_for(client, config), config, unique("thread"), model, message)


def _ask() -> dict[str, object]:
    return calls(
        tool_call(
            "ask_clarification",
            "ask1",
            question="Which colour?",
            clarification_type="approach_choice",
            options=["red", "blue"],
        )
    )


async def record(tag: str) -> None:
    with tempfile.TemporaryDirectory() as tmp, DevServer(DevServerOptions(port=free_port(), ui=False)) as server:
        home = Path(tmp)
        client = await Client.connect(server.address, data_converter=pydantic_data_converter)
        config = make_config(home, server.address)
        workspace = "/mnt/user-data/workspace"
        scenarios = {
            "tools-clarification-reply": [
                calls(
                    tool_call("write_file", "w1", path=f"{workspace}/a.txt", content="a"),
                    tool_call("bash", "b1", command=f"cat {workspace}/a.txt"),
                ),
                _ask(),
                calls(tool_call("read_file", "r1", path=f"{workspace}/a.txt")),
                answer("done"),
            ],
            "cancelled-while-paused": [_ask(), answer("never")],
        }
        async with running_worker(client, config):
            for name, script in scenarios.items():
                handle = await _start(client, config, f"scenario {name}", write_script(home, script))
                await settle(handle)
                if name == "cancelled-while-paused":
                    await handle.cancel()
                else:
                    await handle.execute_update("reply", ReplyInput(option_id="option-2"), result_type=RunView)
                with contextlib.suppress(Exception):
                    await handle.result()
                _write(f"{tag}-{name}", await handle.fetch_history())

        # Cancelled while its first sandbox call runs: after_agent releases by thread (the id never came back).
        started = home / "first-call-started"
        first_call = calls(tool_call("bash", "b1", command=f"touch {started}; sleep 3"))
        async with running_worker(client, config):
            model = write_script(home, [first_call])
            handle = await _start(client, config, "scenario cancelled-during-first-tool", model)
            await wait_for_file(started)
            await handle.cancel()
            with contextlib.suppress(Exception):
                await handle.result()
            _write(f"{tag}-cancelled-during-first-tool", await handle.fetch_history())

        # A lead that delegates to a subagent: the parent's history and the child workflow's own.
        child_model = write_script(home, [answer("found it")], name="child.json")
        delegating = make_config(
            home, server.address, run={"subagent_enabled": True, "subagents": {"model": child_model}}
        )
        task = tool_call("task", "t1", description="job t1", prompt="look into it", subagent_type="general-purpose")
        parent_model = write_script(home, [calls(task), answer("done")], name="parent.json")
        async with running_worker(client, delegating):
            handle = await _start(client, delegating, "scenario subagent", parent_model)
            await handle.result()
            history = await handle.fetch_history()
            _write(f"{tag}-subagent-parent", history)
            (child,) = [
                e.child_workflow_execution_started_event_attributes.workflow_execution.workflow_id
                for e in history.events
                if e.HasField("child_workflow_execution_started_event_attributes")
            ]
            _write(f"{tag}-subagent-child", await client.get_workflow_handle(child).fetch_history())


def _write(name: str, history: WorkflowHistory) -> None:
    path = OUT / f"{name}.json"
    path.write_text(history.to_json(), encoding="utf-8")
    print(f"wrote {path.relative_to(REPO)} ({len(history.events)} events)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", required=True, help="prefix for the history files: the release they come from (v2)")
    args = parser.parse_args()
    existing = sorted(OUT.glob(f"{args.tag}-*.json"))
    if existing:
        # Committed histories are the shape in-flight runs of that release have: re-recording would erase it.
        parser.error(f"{existing[0].relative_to(REPO)} exists: histories of a release are kept; use a new --tag")
    OUT.mkdir(parents=True, exist_ok=True)
    asyncio.run(record(args.tag))


if __name__ == "__main__":
    main()
