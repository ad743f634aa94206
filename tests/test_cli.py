"""The CLI contract: exit codes, JSON fields, one-line errors, and the embedded stack across processes."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.cli import run_command
from workers.devserver import free_port, port_answers
from workers.testing import answer, ask_clarification, calls, tool_call, unique, write_script
from workers.testing.processes import env_worker_process, hartflow_command

RUN_FIELDS = {"thread_id", "run_id", "workflow_id", "status", "stop_reason", "final_message", "pending_input", "ui_url"}


def _hartflow(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return hartflow_command(cwd, env, *args, timeout=120)


def test_embedded_run_pauses_exits_and_a_second_process_finishes_it(tmp_path: Path) -> None:
    port, ui_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "HARTFLOW_"))}
    env |= {
        "HARTFLOW_TEMPORAL__EMBEDDED_PORT": str(port),
        "HARTFLOW_TEMPORAL__EMBEDDED_UI_PORT": str(ui_port),
        "HARTFLOW_SANDBOX__ALLOW_HOST_BASH": "true",
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    script = [
        calls(tool_call("bash", "b1", command="echo hello > /mnt/user-data/outputs/hello.txt")),
        ask_clarification(options=["red", "blue"]),
        answer("All blue."),
    ]
    model = write_script(tmp_path, script)

    first = _hartflow(tmp_path, env, "run", "paint it", "--thread", "t-embedded", "--model", model, "--json")
    assert first.returncode == 3, first.stderr
    paused = json.loads(first.stdout)
    assert set(paused) >= RUN_FIELDS
    assert paused["status"] == "awaiting_input"
    assert paused["pending_input"]["question"] == "Which colour?"
    assert paused["ui_url"].startswith(
        f"http://127.0.0.1:{ui_port}/namespaces/default/workflows/hartflow%3Adefault%3At-embedded"
    )
    # The command took its server with it: nothing answers on the port any more.
    assert not port_answers("127.0.0.1", port)
    assert (tmp_path / ".hartflow/temporal.db").exists()

    second = _hartflow(tmp_path, env, "reply", "t-embedded", "--option", "2", "--json")
    assert second.returncode == 0, second.stderr
    done = json.loads(second.stdout)
    assert done["status"] == "completed"
    assert done["final_message"] == "All blue."
    assert done["run_id"] == paused["run_id"], "the same run continues"

    state = _hartflow(tmp_path, env, "state", "t-embedded", "--json")
    assert state.returncode == 0, state.stderr
    messages = json.loads(state.stdout)["messages"]
    transcript = [m for m in messages if m["type"] != "system"]  # DynamicContext's date/memory reminder
    assert [m["type"] for m in transcript] == ["human", "ai", "tool", "ai", "tool", "human", "ai"]
    assert transcript[5]["additional_kwargs"]["human_input_response"]["value"] == "blue"
    assert transcript[2]["tool_call_id"] == "b1"
    outputs = tmp_path / ".hartflow/users/default/threads/t-embedded/user-data/outputs/hello.txt"
    assert outputs.read_text() == "hello\n"


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, home: Path, temporal_address: str) -> Iterator[Path]:
    """CLI commands against the session's server, with a `hartflow worker` process serving the task queue."""
    for name in list(os.environ):
        if name.startswith("HARTFLOW_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TEMPORAL_ADDRESS", temporal_address)
    monkeypatch.setenv("HARTFLOW_STORAGE__HOME", str(home))
    monkeypatch.setenv("HARTFLOW_TEMPORAL__TASK_QUEUE", unique("cli"))
    monkeypatch.setenv("HARTFLOW_SANDBOX__ALLOW_HOST_BASH", "true")
    monkeypatch.chdir(home.parent)
    with env_worker_process(dict(os.environ), home.parent, home.parent / "worker.log"):
        yield home


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run_command(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _nothing_written(home: Path) -> bool:
    return not (home / "users").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "hi", "--model", "nope:x"], "unknown model spec 'nope:x'"),
        (["run", "hi", "--model", "scripted:/does/not/exist.json"], "/does/not/exist.json"),
        (["run", "   ", "--model", "scripted:x.json"], "the message is empty"),
        (["run", "hi", "--thread", "../etc", "--model", "scripted:x.json"], "invalid thread id"),
        (["run", "hi", "--thread", "t" * 65, "--model", "scripted:x.json"], "invalid thread id"),
        (["run", "hi"], "no model configured"),
        (["reply", "never-started", "yes"], "unknown thread never-started"),
        (["status", "never-started"], "unknown thread never-started"),
        (["state", "never-started"], "unknown thread never-started"),
        (["cancel", "never-started"], "unknown thread never-started"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    cli_env: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, out, err = _cli(capsys, *args, "--json")
    assert code == 2
    assert json.loads(out)["error"]
    assert err.count("\n") == 1 and err.startswith("hartflow: error: ")
    assert message in err
    assert _nothing_written(cli_env)


def test_malformed_script_and_config_are_refused(cli_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad_script = cli_env.parent / "bad.json"
    bad_script.write_text('{"responses": [{"content": "x", "bogus": 1}]}')
    code, _, err = _cli(capsys, "run", "hi", "--model", f"scripted:{bad_script}")
    assert code == 2 and "bogus" in err

    bad_config = cli_env.parent / "hartflow.yaml"
    bad_config.write_text("run:\n  recursion_limit: 0\n  colour: blue\n")
    code, _, err = _cli(capsys, "run", "hi", "--config", str(bad_config), "--model", f"scripted:{bad_script}")
    assert code == 2
    assert "run.recursion_limit" in err and "unknown key 'run.colour'" in err
    assert _nothing_written(cli_env)


def test_reply_when_nothing_is_pending_and_busy_threads(cli_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = write_script(cli_env.parent, [answer("hello"), ask_clarification(options=["red", "blue"]), answer("done")])
    code, out, _ = _cli(capsys, "run", "hi", "--thread", "t-done", "--model", model, "--json")
    assert code == 0 and json.loads(out)["final_message"] == "hello"
    code, _, err = _cli(capsys, "reply", "t-done", "yes")
    assert code == 2 and "no run is waiting on thread t-done" in err
    # A finished run's status and events come from its archive: its real chain, its whole progress stream.
    code, out, _ = _cli(capsys, "status", "t-done", "--json")
    assert code == 0 and json.loads(out)["chain"][-1] == "Clarification"
    code, out, _ = _cli(capsys, "events", "t-done")
    events = [json.loads(line) for line in out.splitlines()]
    # seq is the event's offset in the run's workflow stream, which also carries the API's `messages` topic.
    seqs = [e["seq"] for e in events]
    assert code == 0 and seqs == sorted(set(seqs))
    assert events[0]["kind"] == "model_call" and events[-1]["kind"] == "run_finished"
    code, out, _ = _cli(capsys, "events", "t-done", "--from", str(events[1]["seq"]))
    assert [json.loads(line) for line in out.splitlines()] == events[1:]

    paused_model = write_script(cli_env.parent, [ask_clarification(options=["red", "blue"]), answer("done")])
    code, out, _ = _cli(capsys, "run", "hi", "--thread", "t-busy", "--model", paused_model, "--json")
    assert code == 3
    run_id = json.loads(out)["run_id"]
    code, _, err = _cli(capsys, "run", "again", "--thread", "t-busy", "--model", paused_model)
    assert code == 2 and f"thread t-busy is busy: run {run_id} is awaiting_input" in err
    code, _, err = _cli(capsys, "reply", "t-busy", "--option", "7")
    assert code == 2 and "unknown option '7'" in err

    code, out, _ = _cli(capsys, "status", "t-busy", "--json")
    status = json.loads(out)
    assert code == 0 and status["status"] == "awaiting_input" and status["chain"][-1] == "Clarification"

    code, out, _ = _cli(capsys, "cancel", "t-busy", "--json")
    assert code == 0 and json.loads(out)["status"] == "cancelled"
    code, out, _ = _cli(capsys, "status", "t-busy", "--json")
    cancelled = json.loads(out)
    assert cancelled["status"] == "cancelled" and cancelled["chain"] == status["chain"]


def test_signal_replies_through_the_cli(cli_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = write_script(cli_env.parent, [ask_clarification(options=["red", "blue"]), answer("signalled")])
    code, _, _ = _cli(capsys, "run", "hi", "--thread", "t-signal", "--model", model)
    assert code == 3
    code, out, _ = _cli(capsys, "reply", "t-signal", "blue", "--signal", "--json")
    assert code == 0 and json.loads(out)["final_message"] == "signalled"
    code, out, _ = _cli(capsys, "state", "t-signal", "--json")
    assert json.loads(out)["messages"][-2]["additional_kwargs"]["human_input_response"]["value"] == "blue"


def test_a_query_nobody_can_answer_is_one_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
    home: Path,
    temporal_address: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A server that no worker polls (say, one left behind by another tool): ``status`` of a running run fails with
    one line naming the server and what to start, exit 1."""
    for name in list(os.environ):
        if name.startswith("HARTFLOW_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TEMPORAL_ADDRESS", temporal_address)
    monkeypatch.setenv("HARTFLOW_STORAGE__HOME", str(home))
    monkeypatch.setenv("HARTFLOW_TEMPORAL__TASK_QUEUE", unique("nobody"))
    monkeypatch.chdir(home.parent)
    model = write_script(tmp_path, [answer("never")])
    code, _, err = _cli(capsys, "run", "hi", "--thread", "t-orphan", "--model", model, "--detach")
    assert code == 0, err
    code, out, err = _cli(capsys, "status", "t-orphan", "--json")
    assert code == 1
    assert err.count("\n") == 1 and err.startswith(f"hartflow: error: Temporal server at {temporal_address}: "), err
    assert "hartflow worker" in err and "Traceback" not in err
    assert "error" in json.loads(out)


def test_a_temporal_server_that_is_down_is_one_line_exit_1(tmp_path: Path) -> None:
    """Found by bench.soak: ``hartflow reply`` while the Temporal server was being restarted printed the SDK's
    ``RuntimeError: Failed client connect`` traceback."""
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARTFLOW_", "TEMPORAL_"))}
    done = _hartflow(tmp_path, {**env, "TEMPORAL_ADDRESS": address}, "reply", "some-thread", "blue")
    assert done.returncode == 1
    assert done.stderr.startswith(f"hartflow: error: cannot reach the Temporal server at {address}: ")
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
