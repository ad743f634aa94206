"""What someone inspecting a run sees, through the official ``temporal`` CLI and through hartflow: activity and
timer summaries, current details, search attributes, handler descriptions, the queries, ``hartflow runs``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.support import start_run
from workers.cli import run_command
from workers.devserver_options import find_temporal_cli
from workers.testing import (
    answer,
    ask_clarification,
    calls,
    make_config,
    running_worker,
    settle,
    tool_call,
    unique,
    write_script,
)
from workers.testing.history import history_events, scheduled_activities
from workflows import search_attributes as sa
from workflows.run import ReplyInput, RunView

_HANDLER_DESCRIPTIONS = {
    "status": "The run: status, stop reason, turns, pending question.",
    "pending_input": "The pending human_input_request payload, or null.",
    "chain": "The middleware chain of this run, outermost first.",
    "events": "Progress events (turns, tools, retries, pauses) from the given seq on, since the last "
    "continue-as-new; the workflow stream's topic 'progress' has the whole run.",
    "state": "The thread state in brief: one line per message, title, todos, artifacts, sandbox, uploads.",
    "clarification_reply": 'Answer the pending clarification: a string, or {"answer", "option_id", "fields", '
    '"request_id"}.',
    "llm_retry": "A model.invoke attempt failed and Temporal will retry it (recorded as an llm_retry event).",
    "reply": "Answer the pending clarification (validated; rejected replies leave no history).",
    "wait_settled": "Returns once the run is waiting for input or has ended.",
}
"""What the server lists for each of the run workflow's handlers (queries, signals, updates)."""


async def _temporal(address: str, *args: str) -> Any:
    """Run the official ``temporal`` CLI (without blocking the worker on this loop) and decode its JSON output."""
    process = await asyncio.create_subprocess_exec(
        find_temporal_cli(),
        *args,
        "--address",
        address,
        "-o",
        "json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, err.decode()
    return json.loads(out) if out.strip() else None


async def _eventually(probe: Callable[[], Awaitable[bool]], what: str) -> None:
    """Visibility is eventually consistent: ask again until ``probe`` holds (bounded)."""
    for _ in range(100):
        if await probe():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"never saw {what}")


def _summaries(events: list[Any], event_type: int) -> list[str]:
    return [
        json.loads(e.user_metadata.summary.data or b'""') if e.HasField("user_metadata") else ""
        for e in events
        if e.event_type == event_type
    ]


async def test_a_paused_run_is_readable_from_the_temporal_cli(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    model = write_script(
        home,
        [
            calls(tool_call("bash", "b1", command="ls -la /mnt/user-data")),
            ask_clarification(options=["red", "blue"]),
            answer("Blue it is."),
        ],
    )
    async with running_worker(client, config):
        # start_run sets only the thread and the status: the run fills in the rest of its search attributes.
        handle = await start_run(client, config, "paint it", model=model)
        assert (await settle(handle)).status == "awaiting_input"
        wid = handle.id

        [pending] = (await _temporal(temporal_address, "workflow", "query", "-w", wid, "--type", "pending_input"))[
            "queryResult"
        ]
        assert pending["question"] == "Which colour?"
        assert [o["label"] for o in pending["options"]] == ["red", "blue"]

        [chain] = (await _temporal(temporal_address, "workflow", "query", "-w", wid, "--type", "chain"))["queryResult"]
        assert chain[-1] == "Clarification"

        [state] = (await _temporal(temporal_address, "workflow", "query", "-w", wid, "--type", "state"))["queryResult"]
        assert [m["type"] for m in state["messages"]][-4:] == ["ai", "tool", "ai", "tool"]
        assert state["messages"][-4]["tool_calls"] == ["bash"]
        assert state["messages"][-1]["text"].startswith("🔀 Which colour?")

        [metadata] = (await _temporal(temporal_address, "workflow", "metadata", "-w", wid))["queryResult"]
        details = metadata["currentDetails"]
        assert "**Status:** awaiting_input · turn 2" in details
        assert "**Last tool:** bash · ls -la /mnt/user-data" in details
        assert "**Waiting for an answer:** Which colour?" in details
        assert "`option-1` red" in details and "`option-2` blue" in details
        definition = metadata["definition"]
        described = {
            d["name"]: d.get("description")
            for kind in ("queryDefinitions", "signalDefinitions", "updateDefinitions")
            for d in definition[kind]
        }
        # The handlers live in the run workflow's mixins (workflows/run/pause.py, _view.py): the server must still
        # see each under its name with its description, word for word.
        assert {name: described.get(name) for name in _HANDLER_DESCRIPTIONS} == _HANDLER_DESCRIPTIONS

        async def listed() -> bool:
            rows = await _temporal(temporal_address, "workflow", "list", "--query", 'HartflowStatus="awaiting_input"')
            return wid in [row["execution"]["workflowId"] for row in rows or []]

        await _eventually(listed, "the paused run in the awaiting_input filter")
        attributes = (await handle.describe()).typed_search_attributes
        assert attributes.get(sa.STATUS) == "awaiting_input"
        assert attributes.get(sa.USER_ID) == "default"
        assert attributes.get(sa.MODEL) == model
        assert attributes.get(sa.TURNS) == 2

        # A person can answer from the CLI (or the Web UI's signal dialog) with a bare string.
        await _temporal(
            temporal_address, "workflow", "signal", "-w", wid, "--name", "clarification_reply", "-i", '"blue"'
        )
        final = await handle.result()
        events = await history_events(handle)
    assert final.status == "completed" and final.final_message == "Blue it is."
    final_attributes = (await handle.describe()).typed_search_attributes
    assert (final_attributes.get(sa.STATUS), final_attributes.get(sa.TURNS)) == ("completed", 3)

    # Every activity, local activity and timer says what it is for.
    activities = scheduled_activities(events)
    assert all(summary for _, summary in activities), activities
    model_label = f"model scripted:{Path(model.removeprefix('scripted:')).name}"
    assert [s for n, s in activities if n == "model.invoke"] == [f"{model_label} · turn {t}" for t in (1, 2, 3)]
    assert ("tool.execute", "tool bash · ls -la /mnt/user-data") in activities
    local = [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    ]
    assert local and all(json.loads(e.user_metadata.summary.data) for e in local)
    assert "DynamicContext.before_agent · load memory" in _summaries(local, EventType.EVENT_TYPE_MARKER_RECORDED)
    assert _summaries(events, EventType.EVENT_TYPE_TIMER_STARTED) == ["awaiting clarification"]


async def test_stop_reason_reaches_the_search_attributes_and_details(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address, run={"recursion_limit": 1})
    model = write_script(home, [calls(tool_call("ls", path="/mnt/user-data")), answer("never")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "look", model=model)
        view = await handle.result()
        metadata = await handle.query("__temporal_workflow_metadata")
    assert view.stop_reason == "recursion_limit"
    attributes = (await handle.describe()).typed_search_attributes
    assert attributes.get(sa.STOP_REASON) == "recursion_limit"
    assert "**Stop reason:** recursion_limit" in metadata.current_details


async def test_hartflow_runs_lists_runs_through_visibility(
    client: Client, home: Path, temporal_address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = make_config(home, temporal_address)
    config_file = tmp_path / "hartflow.yaml"
    config_file.write_text(json.dumps(json.loads(config.model_dump_json())), encoding="utf-8")
    paused, done = unique("paused"), unique("done")
    async with running_worker(client, config):
        asking = write_script(home, [ask_clarification(options=["red", "blue"])])
        handle = await start_run(client, config, "ask", model=asking, thread_id=paused)
        await settle(handle)
        finished = await start_run(client, config, "hi", model=write_script(home, [answer("hi")]), thread_id=done)
        await finished.result()

        async def runs(*args: str) -> list[dict[str, Any]]:
            capsys.readouterr()
            code = await asyncio.to_thread(run_command, ["runs", "--config", str(config_file), "--json", *args])
            assert code == 0
            rows: list[dict[str, Any]] = json.loads(capsys.readouterr().out)["runs"]
            return rows

        async def settled_in_visibility() -> bool:
            awaiting = {r["thread_id"] for r in await runs("--status", "awaiting_input")}
            completed = {r["thread_id"] for r in await runs("--status", "completed")}
            return paused in awaiting and done in completed and done not in awaiting

        await _eventually(settled_in_visibility, "both runs with their status in visibility")
        [row] = await runs("--thread", paused)
        assert row["status"] == "awaiting_input" and row["turns"] == 1 and row["workflow_id"] == handle.id
        assert row["user_id"] == "default" and row["model"].startswith("scripted:")

        capsys.readouterr()
        assert await asyncio.to_thread(run_command, ["runs", "--config", str(config_file), "--thread", done]) == 0
        table = capsys.readouterr().out.splitlines()
        assert table[0].split()[:3] == ["THREAD", "STATUS", "TURNS"]
        assert table[1].split()[:3] == [done, "completed", "1"]

        assert await asyncio.to_thread(run_command, ["runs", "--config", str(config_file), "--thread", "no/such"]) == 2
        await handle.execute_update("reply", ReplyInput(option_id="option-1"), result_type=RunView)
