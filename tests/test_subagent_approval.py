"""A subagent's gated tool call, answered on its lead run (real Temporal, real worker, real API server, scripted
models): the child waits, the lead shows the request as its own pending approval (its status, its committed
``approvals`` channel, the API's interrupt, ``hartflow runs --awaiting approval``), and the decision taken on the
lead — its ``approval_review`` signal, or ``command.resume`` through ``langgraph-sdk`` — reaches the child."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from langgraph_sdk import get_client
from temporalio.client import Client
from temporalio.worker import Replayer

from tests.support import hartflow_cli, start_run, thread_state
from vocabulary.workflow_ids import run_workflow_id
from workers.testing import answer, calls, make_config, running_worker, serving_api, settle, tool_call, write_script
from workers.worker import WORKFLOWS, connect, workflow_runner
from workflows.run import RunView
from workflows.run.delegation import child_workflow_id

GATED = {"rules": [{"tool": "bash", "args": {"command": "^echo"}}]}


def subagent_approval_config(home: Path, address: str, lead: str | None = None, **approval: Any) -> Any:
    child = write_script(home, [calls(tool_call("bash", "b1", command="echo from child")), answer("child report")])
    gated = {**GATED, **approval}
    run = {"subagent_enabled": True, "subagents": {"model": child}, "middlewares": {"tool_approval": gated}}
    return make_config(home, address, model=lead, run=run)


def lead_script(home: Path) -> str:
    task = tool_call("task", "t1", description="job t1", prompt="run the echo", subagent_type="general-purpose")
    return write_script(home, [calls(task), answer("all done")])


def child_tool_steps(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The subagent's tool results, as its steps reached the lead (``workflows/run/step_reports.py``)."""
    steps = [event.get("message") or {} for event in events if event.get("type") == "task_running"]
    return {step["tool_call_id"]: step for step in steps if step.get("type") == "tool"}


async def test_the_leads_signal_approves_its_subagents_call_and_the_audit_is_the_leads(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = subagent_approval_config(home, temporal_address)
    async with running_worker(client, config):
        handle = await start_run(client, config, "delegate it", model=lead_script(home))
        view = await settle(handle)
        child = client.get_workflow_handle(child_workflow_id(handle.id, "t1"))
        child_view = await child.query("status", result_type=RunView)
        committed = thread_state(home, view.thread_id)["approvals"]
        details = (await handle.query("__temporal_workflow_metadata")).current_details
        await handle.signal("approval_review", {"decisions": [{"type": "approve"}]})
        final = await handle.result()
        events = await handle.query("events", 0, result_type=list[dict[str, Any]])
        histories = [await handle.fetch_history(), await child.fetch_history()]

    assert view.status == "awaiting_approval", view
    assert view.pending_input is not None
    assert view.pending_input["subagent_workflow_id"] == child.id
    assert view.pending_input["action_requests"][0]["args"] == {"command": "echo from child"}
    assert child_view.status == "awaiting_approval"
    assert "`b1` bash · command='echo from child'" in details and f"asked by the subagent `{child.id}`" in details
    assert [(r["status"], r["subagent_workflow_id"]) for r in committed] == [("pending", child.id)]
    assert final.status == "completed" and final.final_message == "all done"
    assert child_tool_steps(events)["b1"]["content"].startswith("from child")
    [record] = thread_state(home, final.thread_id)["approvals"]
    assert record["status"] == "decided"
    assert [(d["type"], d["via"]) for d in record["decisions"]] == [("approve", "signal")]
    replayer = Replayer(
        workflows=list(WORKFLOWS), data_converter=client.data_converter, workflow_runner=workflow_runner()
    )
    for history in histories:
        await replayer.replay_workflow(history)


async def test_a_subagents_approval_is_the_leads_interrupt_its_inbox_row_and_its_resume(
    client: Client, home: Path, temporal_address: str, tmp_path: Path
) -> None:
    """``langgraph-sdk`` as LangChain HITL clients use it: ``runs.wait`` returns the interrupt, the resume carries
    ``command={"resume": {"decisions": [...]}}``; ``hartflow runs --awaiting approval`` lists the lead's thread."""
    config = subagent_approval_config(home, temporal_address, lead=lead_script(home))
    cli = tmp_path / "cli.yaml"
    cli.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_none=True)))
    async with running_worker(client, config), serving_api(config, await connect(config)) as url:
        sdk = get_client(url=url)
        thread_id = (await sdk.threads.create())["thread_id"]
        start = {"messages": [{"role": "user", "content": "delegate it"}]}
        paused = await sdk.runs.wait(thread_id, "hartflow", input=start)
        code, out, err = await hartflow_cli(cli, "runs", "--awaiting", "approval", "--json")
        assert code == 0, err
        rows = [row for row in json.loads(out)["approvals"] if row["thread_id"] == thread_id]
        reject = {"type": "reject", "message": "not from a subagent"}
        final = await sdk.runs.wait(thread_id, "hartflow", command={"resume": {"decisions": [reject]}})
        lead = client.get_workflow_handle(run_workflow_id(config.user_id, thread_id))
        events = await lead.query("events", 0, result_type=list[dict[str, Any]])

    [interrupt] = paused["__interrupt__"]
    assert interrupt["value"]["action_requests"][0]["args"] == {"command": "echo from child"}
    assert interrupt["value"]["review_configs"] == [
        {"action_name": "bash", "allowed_decisions": ["approve", "edit", "reject"]}
    ]
    assert [(row["call_id"], row["tool"]) for row in rows] == [("b1", "bash")]
    assert "__interrupt__" not in final
    task_result = next(m for m in final["messages"] if m["type"] == "tool" and m["name"] == "task")
    assert "child report" in task_result["content"]
    rejected = child_tool_steps(events)["b1"]
    assert rejected["status"] == "error" and rejected["content"] == "not from a subagent"
    [record] = thread_state(home, thread_id)["approvals"]
    assert [(d["type"], d.get("message"), d["via"], d["reviewer"]) for d in record["decisions"]] == [
        ("reject", "not from a subagent", "update", config.user_id)
    ]


async def test_a_subagents_request_nobody_answers_gets_its_timeout_decision_on_the_lead(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = subagent_approval_config(home, temporal_address, timeout_seconds=1, on_timeout="approve")
    async with running_worker(client, config):
        handle = await start_run(client, config, "delegate it", model=lead_script(home))
        final = await handle.result()
        events = await handle.query("events", 0, result_type=list[dict[str, Any]])
    assert final.status == "completed" and final.final_message == "all done"
    assert child_tool_steps(events)["b1"]["content"].startswith("from child")
    [record] = thread_state(home, final.thread_id)["approvals"]
    assert record["status"] == "decided" and record["subagent_workflow_id"] == child_workflow_id(handle.id, "t1")
    assert [(d["type"], d["via"]) for d in record["decisions"]] == [("approve", "timeout")]
