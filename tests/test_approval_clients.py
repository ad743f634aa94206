"""Tool approvals from every client: ``langgraph-sdk`` against the Agent Server API (the interrupt is LangChain's
``{action_requests, review_configs}``, answered with ``command={"resume": {"decisions": [...]}}``: the shape
LangChain's ``HumanInTheLoopMiddleware`` clients send, ``langchain/agents/middleware/human_in_the_loop.py``), and
the ``hartflow`` CLI in processes of its own (``approve``, ``approve --edit``, ``reject --reason``, ``runs
--awaiting approval``), including a worker SIGKILLed while the run waits: the approved call runs exactly once."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from langgraph_sdk import get_client
from langgraph_sdk.errors import BadRequestError, UnprocessableEntityError
from temporalio.client import Client

from tests.support import hartflow_cli, start_run, thread_state
from vocabulary.workflow_ids import run_workflow_id
from workers.config import HartflowConfig
from workers.testing import (
    answer,
    calls,
    make_config,
    running_worker,
    serving_api,
    settle,
    tool_call,
    unique,
    write_script,
)
from workers.testing.history import history_events, scheduled_activities
from workers.testing.processes import kill_hard, worker_process
from workers.worker import connect

GATED = {"rules": [{"tool": "bash", "args": {"command": "^echo"}, "allowed_decisions": ["approve", "edit", "reject"]}]}


def three_gated_turns(directory: Path) -> str:
    return write_script(
        directory,
        [
            calls(tool_call("bash", "b1", command="echo first")),
            calls(tool_call("bash", "b2", command="echo second")),
            calls(tool_call("bash", "b3", command="echo third")),
            answer("all done"),
        ],
    )


def results(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["tool_call_id"]: m for m in state["messages"] if m["type"] == "tool"}


# -- langgraph-sdk ------------------------------------------------------------------------------------------


@pytest.fixture
async def url(home: Path, temporal_address: str, client: Client) -> AsyncIterator[str]:
    config = make_config(home, temporal_address, model=three_gated_turns(home))
    async with running_worker(client, config), serving_api(config, await connect(config)) as base:
        yield base


async def test_langgraph_sdk_sees_the_hitl_interrupt_and_approves_edits_and_rejects(url: str, home: Path) -> None:
    """The run's own rules come in ``context.tool_approval`` (DeerFlow's app sends run options in ``context``:
    ``frontend/src/core/threads/hooks.ts``)."""
    sdk = get_client(url=url)
    thread_id = (await sdk.threads.create())["thread_id"]
    start = {"messages": [{"role": "user", "content": "go"}]}
    paused = await sdk.runs.wait(thread_id, "hartflow", input=start, context={"tool_approval": GATED})
    [interrupt] = paused["__interrupt__"]
    assert interrupt["value"] == {
        "action_requests": [
            {
                "name": "bash",
                "args": {"command": "echo first"},
                "description": 'Tool execution requires approval\n\nTool: bash\nArgs: {"command": "echo first"}',
            }
        ],
        "review_configs": [{"action_name": "bash", "allowed_decisions": ["approve", "edit", "reject"]}],
    }
    thread = await sdk.threads.get(thread_id)
    assert thread["status"] == "interrupted"
    assert list(thread["interrupts"].values()) == [[interrupt]]

    before = thread_state(home, thread_id)
    for bad in (
        {"decisions": [{"type": "maybe"}]},
        {"decisions": [{"type": "edit", "edited_action": {"name": "bash", "args": {"command": 3}}}]},
        {"decisions": []},
        {"decisions": "approve"},
    ):
        with pytest.raises(UnprocessableEntityError):
            await sdk.runs.create(thread_id, "hartflow", command={"resume": bad})
    with pytest.raises(UnprocessableEntityError):
        await sdk.runs.create(thread_id, "hartflow", input={"messages": [{"role": "user", "content": "yes"}]})
    assert thread_state(home, thread_id) == before, "a refused decision writes nothing"
    assert (await sdk.threads.get(thread_id))["status"] == "interrupted"

    second = await sdk.runs.wait(thread_id, "hartflow", command={"resume": {"decisions": [{"type": "approve"}]}})
    assert second["__interrupt__"][0]["value"]["action_requests"][0]["args"] == {"command": "echo second"}
    edit = {"type": "edit", "edited_action": {"name": "bash", "args": {"command": "echo EDITED"}}}
    third = await sdk.runs.wait(thread_id, "hartflow", command={"resume": {"decisions": [edit]}})
    assert third["__interrupt__"][0]["value"]["action_requests"][0]["args"] == {"command": "echo third"}
    reject = {"type": "reject", "message": "no third time"}
    final = await sdk.runs.wait(thread_id, "hartflow", command={"resume": {"decisions": [reject]}})
    assert final["messages"][-1]["content"] == "all done"
    assert (await sdk.threads.get(thread_id))["status"] == "idle"

    state = thread_state(home, thread_id)
    ran = results(state)
    assert ran["b1"]["content"].startswith("first") and ran["b2"]["content"].startswith("EDITED")
    assert ran["b3"]["content"] == "no third time" and ran["b3"]["status"] == "error"
    assert [(r["decisions"][0]["type"], r["decisions"][0]["reviewer"]) for r in state["approvals"]] == [
        ("approve", "default"),
        ("edit", "default"),
        ("reject", "default"),
    ]


async def test_a_timeout_over_the_api_clears_the_interrupt_and_the_state_shows_the_decision(
    url: str, home: Path, client: Client
) -> None:
    """Nobody answers: the interrupt the client saw goes away, the call gets its rule's on-timeout decision, and
    the thread's state (``threads.get_state``, what every client reads) keeps it in the audit."""
    sdk = get_client(url=url)
    thread_id = (await sdk.threads.create())["thread_id"]
    rule = {"tool": "bash", "args": {"command": "first"}, "timeout_seconds": 2, "on_timeout": "reject"}
    start = {"messages": [{"role": "user", "content": "go"}]}
    paused = await sdk.runs.wait(thread_id, "hartflow", input=start, context={"tool_approval": {"rules": [rule]}})
    assert paused["__interrupt__"][0]["value"]["action_requests"][0]["args"] == {"command": "echo first"}
    # The run goes on by itself once the deadline passes: wait for its workflow to end.
    view = await client.get_workflow_handle(run_workflow_id("default", thread_id)).result()
    assert view["status"] == "completed"

    thread = await sdk.threads.get(thread_id)
    assert thread["status"] == "idle" and thread["interrupts"] == {}
    state = await sdk.threads.get_state(thread_id)
    assert state["interrupts"] == [] and state["next"] == []
    [record] = state["values"]["approvals"]
    decision = record["decisions"][0]
    assert record["status"] == "decided" and (decision["type"], decision["via"]) == ("reject", "timeout")
    ran = results(state["values"])
    assert ran["b1"]["status"] == "error" and "No reviewer decided" in ran["b1"]["content"]
    assert ran["b2"]["content"].startswith("second"), "only the first call was gated"
    with pytest.raises(BadRequestError):  # a late decision: the thread is no longer interrupted
        await sdk.runs.create(thread_id, "hartflow", command={"resume": {"decisions": [{"type": "approve"}]}})


# -- the CLI, and a worker killed while the run waits ---------------------------------------------------------


async def test_the_cli_lists_approves_edits_rejects_and_a_killed_worker_runs_the_call_once(
    client: Client, home: Path, temporal_address: str, tmp_path: Path
) -> None:
    config: HartflowConfig = make_config(home, temporal_address, run={"middlewares": {"tool_approval": GATED}})
    cli = tmp_path / "cli.yaml"
    cli.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_none=True)))
    with worker_process(config, tmp_path / "worker-1.yaml") as worker:
        thread_id = unique("approvals")
        handle = await start_run(client, config, "go", model=three_gated_turns(home), thread_id=thread_id)
        assert (await settle(handle)).status == "awaiting_approval"
        kill_hard(worker)  # the run waits with no worker at all

    code, out, err = await hartflow_cli(cli, "runs", "--awaiting", "approval", "--json")
    assert code == 0, err
    [row] = [r for r in json.loads(out)["approvals"] if r["workflow_id"] == handle.id]
    assert (row["call_id"], row["tool"], row["args"]) == ("b1", "bash", "command='echo first'")
    assert row["deadline"] > row["requested_at"]

    with worker_process(config, tmp_path / "worker-2.yaml"):
        code, out, err = await hartflow_cli(cli, "approve", thread_id, "--json")
        assert code == 3, err  # paused again, on the second call
        code, out, err = await hartflow_cli(cli, "approve", thread_id, "--call", "nope")
        assert code == 2 and "unknown call 'nope'" in err
        edited = tmp_path / "args.json"
        edited.write_text(json.dumps({"command": "echo EDITED"}))
        code, out, err = await hartflow_cli(cli, "approve", thread_id, "--call", "b2", "--edit", str(edited), "--json")
        assert code == 3, err
        code, out, err = await hartflow_cli(cli, "reject", thread_id, "--reason", "not this one", "--json")
        assert code == 0, err
        assert json.loads(out)["final_message"] == "all done"
        code, out, err = await hartflow_cli(cli, "state", thread_id, "--json")
        assert code == 0, err
    audit = json.loads(out)["approvals"]
    assert [(r["decisions"][0]["type"], r["decisions"][0]["via"]) for r in audit] == [
        ("approve", "update"),
        ("edit", "update"),
        ("reject", "update"),
    ]
    ran = results(thread_state(home, thread_id))
    assert ran["b1"]["content"].startswith("first") and ran["b2"]["content"].startswith("EDITED")
    assert ran["b3"]["content"] == "not this one"
    tools = [summary for kind, summary in scheduled_activities(await history_events(handle)) if kind == "tool.execute"]
    assert len([s for s in tools if "echo first" in s]) == 1, "the approved call ran exactly once"
