"""Live progress through the run's workflow stream: ``hartflow run`` shows it as the run goes, ``--events``
streams JSON lines, and a client that reconnects resumes from its offset, across continue-as-new too."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from tests.support import start_run
from workers.cli import run_command
from workers.config import HartflowConfig
from workers.testing import answer, calls, make_config, running_worker, tool_call, unique, write_script
from workflows.run import PROGRESS_TOPIC


def _config_file(config: HartflowConfig, directory: Path) -> str:
    path = directory / "hartflow.yaml"
    path.write_text(config.model_dump_json(), encoding="utf-8")  # JSON is YAML
    return str(path)


async def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = await asyncio.to_thread(run_command, list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def test_run_shows_progress_as_it_goes_and_events_stream_json_lines(
    client: Client, home: Path, temporal_address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = make_config(home, temporal_address)
    config_file = _config_file(config, tmp_path)
    ask = tool_call(
        "ask_clarification", "ask1", question="Which colour?", clarification_type="approach_choice", options=["a", "b"]
    )
    model = write_script(
        home,
        [
            calls(tool_call("bash", "b1", command="ls -la /mnt/user-data")),
            calls(ask),
            calls(tool_call("ls", "l1", path="/mnt/user-data/workspace")),
            answer("Painted it b."),
        ],
    )
    thread = unique("progress")
    async with running_worker(client, config):
        code, out, err = await _cli(
            capsys, "run", "paint it", "--thread", thread, "--model", model, "--config", config_file
        )
        assert code == 3, err
        assert "Which colour?" in out
        progress = [line.removeprefix("  · ") for line in err.splitlines() if line.startswith("  · ")]
        assert progress == [
            "turn 1: calling the model",
            "tool bash ls -la /mnt/user-data",
            "tool bash → success",
            "turn 2: calling the model",
            "paused: waiting for an answer to “Which colour?”",
        ]

        code, out, err = await _cli(capsys, "reply", thread, "--option", "2", "--events", "--config", config_file)
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    *events, result = lines
    assert result["kind"] == "result" and result["status"] == "completed"
    assert result["final_message"] == "Painted it b."
    # The answers' live tokens come as chunk lines between the events (tests/test_cli_live_tokens.py).
    assert {e["kind"] for e in events if "seq" not in e} <= {"chunk"}
    events = [e for e in events if e["kind"] != "chunk"]
    # The reply's stream starts where the run paused: nothing from before the answer is repeated.
    assert [e["kind"] for e in events] == [
        "resumed",
        "model_call",
        "tool_call",
        "tool_result",
        "model_call",
        "run_finished",
    ]
    # seq is the event's stream offset: increasing, with the run's state items (topic messages) in between.
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs)) and seqs[0] > 0
    assert events[2] | {"at": None} == {
        "seq": events[2]["seq"],
        "kind": "tool_call",
        "type": "tool_call",  # DeerFlow's app reads custom events' type: the kind, where DeerFlow has no name
        "at": None,
        "tool": "ls",
        "call_id": "l1",
        "args": "/mnt/user-data/workspace",
    }
    assert events[-1]["status"] == "completed"


async def test_a_reconnecting_client_resumes_from_its_offset_across_continue_as_new(
    client: Client, home: Path, temporal_address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = make_config(home, temporal_address)
    turns = 16  # past the session server's continue-as-new suggestion
    script = [calls(tool_call("bash", f"c{i}", command=f"echo {i}")) for i in range(turns)]
    thread = unique("resume")
    async with running_worker(client, config):
        handle = await start_run(
            client, config, "count", model=write_script(home, [*script, answer("counted")]), thread_id=thread
        )
        first_run = handle.first_execution_run_id
        stream = WorkflowStreamClient.create(client, handle.id)
        seen: list[dict[str, Any]] = []
        async for item in stream.subscribe([PROGRESS_TOPIC], result_type=dict[str, Any]):
            seen.append(item.data)
            if len(seen) == 5:
                break  # the client goes away mid-run
        final = await handle.result()
        description = await client.get_workflow_handle(handle.id).describe()
        queried = await handle.query("events", 0, result_type=list[dict[str, Any]])
        # ... and comes back later, asking from where it stopped.
        code, out, err = await _cli(
            capsys, "events", thread, "--from", str(seen[-1]["seq"] + 1), "--config", _config_file(config, tmp_path)
        )
    assert code == 0, err
    assert description.run_id != first_run, "the run should have continued as new"
    resumed = [json.loads(line) for line in out.splitlines()]
    everything = seen + resumed
    seqs = [e["seq"] for e in everything]
    assert seqs == sorted(set(seqs))  # nothing repeated; nothing missing: every turn is there (below)
    assert [e["turn"] for e in everything if e["kind"] == "model_call"] == list(range(1, turns + 2))
    assert everything[-1] == everything[-1] | {"kind": "run_finished", "status": "completed"}
    assert final.status == "completed"
    # The events query still answers, for the events of the current run (same seq numbering).
    assert queried and queried == everything[-len(queried) :]
