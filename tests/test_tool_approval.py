"""Tool approvals on real runs (real Temporal, real worker, scripted model): parallel gated calls asked together
while the others run, approve / edit / reject through the ``review`` update and the ``approval_review`` signal,
bad decisions refused without history, timeouts with each policy, the audit in the committed state, and the
rules and decision checks themselves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle, WorkflowUpdateFailedError

from middlewares.tool_approval import ApprovalRule, ToolApprovalConfig
from tests.support import start_run, thread_state
from vocabulary.approvals import ReviewInput, args_problem, validate_review
from vocabulary.human_input import InvalidReplyError, ReplyConflictError
from vocabulary.tools import ToolSpec
from workers.api.served import served_values
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, write_script
from workers.testing.history import history_events
from workflows import search_attributes as sa
from workflows.run import RunView

BASH_SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}


def approval_config(home: Path, address: str, **tool_approval: Any) -> Any:
    rules = tool_approval.pop("rules", [{"tool": "bash", "args": {"command": "^echo"}}])
    return make_config(home, address, run={"middlewares": {"tool_approval": {"rules": rules, **tool_approval}}})


def tool_messages(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["tool_call_id"]: m for m in state["messages"] if m["type"] == "tool"}


async def paused(handle: WorkflowHandle[Any, RunView]) -> dict[str, Any]:
    view = await settle(handle)
    assert view.status == "awaiting_approval", view
    assert view.pending_input is not None
    return view.pending_input


# -- the rules and the checks -------------------------------------------------------------------------------


def test_rules_match_names_globs_mcp_names_and_argument_patterns() -> None:
    config = ToolApprovalConfig(
        rules=[ApprovalRule(tool="bash", args={"command": r"git\s+push"}), ApprovalRule(tool="mcp:github:*")]
    )
    assert config.rule_for("bash", None, {"command": "git  push origin"}) is not None
    assert config.rule_for("bash", None, {"command": "git status"}) is None
    github = ToolSpec("github_create_issue", "", {}, server="github", remote_name="create_issue")
    assert config.rule_for("github_create_issue", github, {}) is not None
    assert config.rule_for("ls", None, {"path": "/"}) is None
    with pytest.raises(ValueError, match="not a regular expression"):
        ApprovalRule(tool="bash", args={"command": "("})


def test_decisions_are_checked_against_the_request() -> None:
    request = {
        "kind": "approval_request",
        "request_id": "approval:1",
        "tool_call_ids": ["a", "b"],
        "action_requests": [{"name": "bash", "args": {"command": "echo"}}, {"name": "bash", "args": {}}],
        "review_configs": [
            {"action_name": "bash", "allowed_decisions": ["approve", "reject"]},
            {"action_name": "bash", "allowed_decisions": ["approve", "edit", "reject"]},
        ],
    }
    schemas = {"bash": BASH_SCHEMA}
    approve = {"type": "approve"}

    def check(review: ReviewInput, decided: dict[str, Any] | None = None) -> dict[str, Any]:
        return validate_review(request, decided or {}, review, schemas)

    for bad, why in [
        (ReviewInput([approve]), "1 decision"),
        (ReviewInput([{"type": "maybe"}, approve]), "unknown decision 'maybe'"),
        (ReviewInput([{"type": "edit", "edited_action": {"args": {"command": "x"}}}, approve]), "not allowed"),
        (ReviewInput([approve, {"type": "edit", "edited_action": {"args": {"command": 1}}}]), "must be string"),
        (ReviewInput([approve, {"type": "edit", "edited_action": {"args": {}}}]), "missing required"),
        (ReviewInput([approve, {"type": "edit", "edited_action": {"name": "ls", "args": {}}}]), "not which tool"),
        (ReviewInput([approve], call_ids=["zzz"]), "unknown call"),
    ]:
        with pytest.raises(InvalidReplyError, match=why):
            check(bad)
    with pytest.raises(ReplyConflictError, match="stale request_id"):
        check(ReviewInput([approve, approve], request_id="approval:0"))
    with pytest.raises(ReplyConflictError, match="decided already"):
        check(ReviewInput([approve], call_ids=["a"]), {"a": approve})
    assert check(ReviewInput([approve], call_ids=["b"])) == {"b": approve}
    assert args_problem(BASH_SCHEMA, {"command": "ls", "extra": True}) is None


# -- on a real run ------------------------------------------------------------------------------------------


async def test_parallel_calls_asked_together_one_approved_one_rejected_while_others_run(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = approval_config(home, temporal_address)
    turn = calls(
        tool_call("bash", "b1", command="echo one"),
        tool_call("ls", "l1", path="/mnt/user-data"),
        tool_call("bash", "b2", command="echo two"),
        tool_call("bash", "b3", command="true"),  # not gated: the rule's pattern does not match
    )
    model = write_script(home, [turn, answer("done")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "go", model=model)
        request = await paused(handle)
        assert request["tool_call_ids"] == ["b1", "b2"]
        assert [a["args"] for a in request["action_requests"]] == [{"command": "echo one"}, {"command": "echo two"}]
        everything = ["approve", "edit", "reject"]
        assert request["review_configs"][0] == {"action_name": "bash", "allowed_decisions": everything}
        description = await handle.describe()
        assert description.typed_search_attributes.get(sa.STATUS) == "awaiting_approval"
        details = (await handle.query("__temporal_workflow_metadata")).current_details
        assert "**Waiting for approval**" in details and "`b1` bash · command='echo one'" in details
        committed = thread_state(home, (await handle.query("status", result_type=RunView)).thread_id)
        assert set(tool_messages(committed)) == {"l1", "b3"}, "the ungated calls ran before the pause"
        assert committed["approvals"][-1]["status"] == "pending"

        before = len(await history_events(handle))
        for bad in [
            ReviewInput([{"type": "approve"}]),
            ReviewInput([{"type": "nope"}, {"type": "approve"}]),
            ReviewInput([{"type": "approve"}] * 2, request_id="approval:stale"),
            ReviewInput([{"type": "approve"}, {"type": "edit", "edited_action": {"args": {"command": 7}}}]),
        ]:
            with pytest.raises(WorkflowUpdateFailedError):
                await handle.execute_update("review", bad, result_type=RunView)
        assert len(await history_events(handle)) == before, "a refused review leaves no history"

        await handle.execute_update(
            "review", ReviewInput([{"type": "approve"}], call_ids=["b1"], reviewer="alice"), result_type=RunView
        )
        assert (await handle.query("status", result_type=RunView)).status == "awaiting_approval"
        reject = {"type": "reject", "message": "not today"}
        by_bob = ReviewInput([reject], call_ids=["b2"], reviewer="bob")
        await handle.execute_update("review", by_bob, result_type=RunView)
        final = await handle.result()
    assert final.status == "completed" and final.final_message == "done"
    state = thread_state(home, final.thread_id)
    results = tool_messages(state)
    assert results["b1"]["content"].startswith("one") and results["b1"]["status"] == "success"
    assert results["b2"]["content"] == "not today" and results["b2"]["status"] == "error"
    [record] = state["approvals"]
    assert record["status"] == "decided"
    assert [(d["type"], d["reviewer"], d["via"]) for d in record["decisions"]] == [
        ("approve", "alice", "update"),
        ("reject", "bob", "update"),
    ]


async def test_an_edit_by_signal_runs_the_edited_call_and_the_transcript_shows_it(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = approval_config(home, temporal_address)
    model = write_script(home, [calls(tool_call("bash", "b1", command="echo asked")), answer("done")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "go", model=model)
        request = await paused(handle)
        edit = {"type": "edit", "edited_action": {"name": "bash", "args": {"command": "echo edited"}}}
        await handle.signal("approval_review", {"decisions": [{"type": "bogus"}]})  # ignored, with a notice
        await handle.signal("approval_review", {"decisions": [edit], "request_id": request["request_id"]})
        final = await handle.result()
    state = thread_state(home, final.thread_id)
    assert tool_messages(state)["b1"]["content"].startswith("edited")
    [ai] = [m for m in state["messages"] if m["type"] == "ai" and m.get("tool_calls")]
    assert ai["tool_calls"][0]["args"] == {"command": "echo edited"}
    decision = state["approvals"][-1]["decisions"][0]
    assert decision["edited_action"]["args"] == {"command": "echo edited"} and decision["via"] == "signal"
    assert state["approvals"][-1]["action_requests"][0]["args"] == {"command": "echo asked"}


async def test_approve_and_reject_by_signal_run_and_refuse_the_calls(
    client: Client, home: Path, temporal_address: str
) -> None:
    """The ``approval_review`` signal (what an operator sends from the Web UI's signal dialog): one call approved
    by a named reviewer, the next turn's call rejected with a reason and no reviewer (the audit says ``signal``)."""
    config = approval_config(home, temporal_address)
    turns = [calls(tool_call("bash", f"b{i}", command=f"echo turn {i}")) for i in (1, 2)]
    model = write_script(home, [*turns, answer("done")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "go", model=model)
        first = await paused(handle)
        await handle.signal("approval_review", {"decisions": [{"type": "approve"}], "reviewer": "carol"})
        second = await paused(handle)
        assert second["request_id"] != first["request_id"] and second["tool_call_ids"] == ["b2"]
        reject = {"type": "reject", "message": "not twice"}
        await handle.signal("approval_review", {"decisions": [reject], "request_id": second["request_id"]})
        final = await handle.result()
    assert final.status == "completed" and final.final_message == "done"
    state = thread_state(home, final.thread_id)
    ran = tool_messages(state)
    assert ran["b1"]["content"].startswith("turn 1") and ran["b1"]["status"] == "success"
    assert ran["b2"]["content"] == "not twice" and ran["b2"]["status"] == "error"
    assert [(d["type"], d["reviewer"], d["via"]) for r in state["approvals"] for d in r["decisions"]] == [
        ("approve", "carol", "signal"),
        ("reject", "signal", "signal"),
    ]


async def test_a_run_cancelled_while_waiting_leaves_no_pending_request(
    client: Client, home: Path, temporal_address: str
) -> None:
    """Nobody is offered a decision the run can no longer take: the committed record is ``abandoned``, and the
    served values carry no approval card (``workers/api/served.py``)."""
    config = approval_config(home, temporal_address)
    model = write_script(home, [calls(tool_call("bash", "b1", command="echo never")), answer("done")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "go", model=model)
        request = await paused(handle)
        assert served_values(thread_state(home, request["thread_id"]))["messages"][-1]["name"] == "ask_clarification"
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
    state = thread_state(home, request["thread_id"])
    assert [(r["request_id"], r["status"]) for r in state["approvals"]] == [(request["request_id"], "abandoned")]
    assert not [m for m in served_values(state)["messages"] if m.get("name") == "ask_clarification"]


@pytest.mark.parametrize("policy", ["approve", "reject"])
async def test_a_request_nobody_answers_gets_its_on_timeout_decision(
    client: Client, home: Path, temporal_address: str, policy: str
) -> None:
    config = approval_config(home, temporal_address, timeout_seconds=1, on_timeout=policy)
    model = write_script(home, [calls(tool_call("bash", "b1", command="echo ran")), answer("done")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "go", model=model)
        final = await handle.result()
    assert final.status == "completed"
    state = thread_state(home, final.thread_id)
    result = tool_messages(state)["b1"]
    decision = state["approvals"][-1]["decisions"][0]
    assert decision["type"] == policy and decision["via"] == "timeout"
    if policy == "approve":
        assert result["content"].startswith("ran")
    else:
        assert result["status"] == "error" and "No reviewer decided" in result["content"]
