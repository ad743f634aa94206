"""Live tokens in the CLI (issue #28): ``hartflow run`` prints the answer while the model generates it, ``--events``
gives chunk events as JSON lines, and a worker SIGKILLed mid-answer leaves a ``chunk_void`` line before the retry's
chunks (people see a restart marker), never a fragment that is not in the final answer."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from vocabulary.contracts import MODEL_INVOKE
from vocabulary.live_tokens import batch_key, chain_prefix
from vocabulary.workflow_ids import run_workflow_id
from workers.cli import run_command
from workers.cli.live_answer import LiveAnswer
from workers.config import HartflowConfig, open_object_store
from workers.testing import make_config, running_worker, unique, write_script
from workers.testing.processes import kill_hard, worker_process

PIECES = ["word0", *(f" word{index}" for index in range(1, 40))]
ANSWER = "".join(PIECES)


def streamed(delay: float) -> dict[str, Any]:
    return {"chunks": PIECES, "chunk_delay": delay, "response_metadata": {"finish_reason": "stop"}}


def config_file(config: HartflowConfig, directory: Path) -> str:
    path = directory / "cli.yaml"
    path.write_text(config.model_dump_json(), encoding="utf-8")  # JSON is YAML
    return str(path)


async def event_lines(*argv: str) -> AsyncIterator[dict[str, Any]]:
    """``hartflow ARGV --events`` as a process of its own, its stdout lines read as they are printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARTFLOW_", "TEMPORAL_"))}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "workers.cli", *argv, "--events", env=env, stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    try:
        async for line in process.stdout:
            yield json.loads(line)
    finally:
        if process.returncode is None:
            await process.wait()


def texts(lines: list[dict[str, Any]]) -> str:
    return "".join(line["content"] for line in lines if line["kind"] == "chunk")


async def test_run_prints_chunk_events_while_the_model_is_still_generating(
    client: Client, home: Path, temporal_address: str, tmp_path: Path
) -> None:
    config = make_config(home, temporal_address, model=write_script(tmp_path, [streamed(0.2)]))
    thread = unique("cli-live")
    lines: list[dict[str, Any]] = []
    async with running_worker(client, config):
        async for line in event_lines("run", "go", "--thread", thread, "--config", config_file(config, tmp_path)):
            lines.append(line)
            if len([seen for seen in lines if seen["kind"] == "chunk"]) == 10:
                handle = client.get_workflow_handle(run_workflow_id(config.user_id, thread))
                pending = (await handle.describe()).raw_description.pending_activities
                assert [a.activity_type.name for a in pending] == [MODEL_INVOKE.name], "printed while generating"
    *events, result = lines
    assert result["kind"] == "result" and result["final_message"] == ANSWER
    chunks = [line for line in events if line["kind"] == "chunk"]
    assert texts(chunks) == ANSWER
    assert {chunk["message_id"] for chunk in chunks} == {chunk["chunk"]["id"] for chunk in chunks}
    call = next(line["seq"] for line in events if line["kind"] == "model_call")
    assert {chunk["call"] for chunk in chunks} == {call}
    assert events.index(chunks[-1]) < events.index(next(e for e in events if e["kind"] == "run_finished"))


async def test_run_prints_the_answer_once_for_people(
    client: Client, home: Path, temporal_address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = make_config(home, temporal_address, model=write_script(tmp_path, [streamed(0.01)]))
    async with running_worker(client, config):
        capsys.readouterr()
        argv = ["run", "go", "--thread", unique("cli-live"), "--config", config_file(config, tmp_path)]
        code = await asyncio.to_thread(run_command, argv)
        captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out == ANSWER + "\n", "streamed as it came, not printed again at the end"
    assert "turn 1: calling the model" in captured.err


async def test_a_worker_killed_mid_answer_gives_a_void_line_and_the_answer_once(
    client: Client, home: Path, temporal_address: str, tmp_path: Path
) -> None:
    model = write_script(tmp_path, [streamed(0.25)])
    config = make_config(home, temporal_address, model=model, run={"model_call": {"heartbeat_seconds": 2}})
    lines: list[dict[str, Any]] = []
    with worker_process(config, tmp_path / "doomed.yaml") as doomed:
        argv = ["run", "go", "--thread", unique("cli-kill"), "--config", config_file(config, tmp_path)]
        lines_seen = event_lines(*argv)
        async for line in lines_seen:
            lines.append(line)
            if len([seen for seen in lines if seen["kind"] == "chunk"]) == 3:
                break
        async with running_worker(client, config):
            kill_hard(doomed)
            lines += [line async for line in lines_seen]
    *events, result = lines
    voids = [line for line in events if line["kind"] == "chunk_void"]
    assert len(voids) == 1 and voids[0]["attempt"] == 2
    assert texts(events[events.index(voids[0]) :]) == ANSWER
    assert result["final_message"] == ANSWER and result["status"] == "completed"


async def test_people_see_a_restart_marker_and_only_the_retry_text_counts(home: Path, temporal_address: str) -> None:
    """The void piece of a restarted attempt, rendered for people (batches written as the model activity does)."""
    config = make_config(home, temporal_address)
    store = open_object_store(config)
    chain = chain_prefix(config.user_id, "thread-marker", "run-1")

    def batch(attempt: int, seq: int, text: str) -> None:
        body = {
            "message_id": "m1",
            "attempt": attempt,
            "seq": seq,
            "chunk": {"type": "AIMessageChunk", "content": text},
        }
        store.put(batch_key(chain, 5, attempt, seq), json.dumps(body).encode())

    out = io.StringIO()
    shown: list[dict[str, Any]] = []
    live = LiveAnswer(store, chain, shown.append, events=False, out=out)
    batch(1, 0, "Hel")
    live({"seq": 5, "kind": "model_call"})
    while "Hel" not in out.getvalue():
        await asyncio.sleep(0.01)
    batch(2, 0, "Hello")
    batch(2, 1, " world")
    live({"seq": 9, "kind": "run_finished"})
    await live.finish()
    assert out.getvalue() == "Hel\n↻ the model call restarted (attempt 2): the text above is void\n\nHello world\n"
    assert live.shown == "Hello world"
    assert [event["kind"] for event in shown] == ["model_call", "run_finished"]


async def test_with_stream_tokens_off_the_answer_comes_in_one_piece(
    client: Client, home: Path, temporal_address: str, tmp_path: Path
) -> None:
    """``run.model_call.stream_tokens: false``: no live-token target, so no chunk lines, the same answer."""
    model = write_script(tmp_path, [streamed(0.01)])
    config = make_config(home, temporal_address, model=model, run={"model_call": {"stream_tokens": False}})
    thread = unique("cli-off")
    async with running_worker(client, config):
        lines = [
            line
            async for line in event_lines("run", "go", "--thread", thread, "--config", config_file(config, tmp_path))
        ]
    *events, result = lines
    assert result["final_message"] == ANSWER
    assert "model_call" in [event["kind"] for event in events]
    assert not [event for event in events if event["kind"].startswith("chunk")]
    store = open_object_store(config)
    assert not list(store.list(f"{chain_prefix(config.user_id, thread, result['run_id'])}/")), "nothing published"
