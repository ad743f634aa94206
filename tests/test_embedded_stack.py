"""The embedded stack never outlives its command: a ``hartflow run`` stopped with Ctrl-C or killed mid-tool-call
takes its Temporal server with it, and the next commands (``status``, ``reply``, a new ``run``) start their own
and carry on; a server this home's stack left behind is stopped, not waited on."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from workers.devserver import DevServer, port_answers
from workers.devserver_options import DevServerOptions
from workers.stack import OWNER_FILE, _started
from workers.testing import answer, calls, tool_call, write_script
from workers.testing.processes import hartflow_command
from workers.testing.temporal import reusable_port

REPO = Path(__file__).resolve().parents[1]
_GONE_SECONDS = 30.0


def _env(port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "HARTFLOW_"))}
    return env | {
        "HARTFLOW_TEMPORAL__EMBEDDED_PORT": str(port),
        "HARTFLOW_TEMPORAL__EMBEDDED_UI_PORT": str(reusable_port()),
        "HARTFLOW_SANDBOX__ALLOW_HOST_BASH": "true",
        # A tool attempt whose worker died is retried after this, not after the default 30 s.
        "HARTFLOW_RUN__TOOL_CALL__HEARTBEAT_SECONDS": "2",
        "PYTHONPATH": str(REPO),
    }


def _hartflow(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return hartflow_command(cwd, env, *args, timeout=180)


def _wait_gone(pid: int, started: str | None) -> None:
    """Wait until process ``pid`` (not our child) has ended."""
    deadline = time.monotonic() + _GONE_SECONDS
    while _started(pid) == started and started is not None:
        assert time.monotonic() < deadline, f"process {pid} still runs"
        time.sleep(0.05)


def _as_from_a_terminal() -> None:
    """Ctrl-C's default action, which a terminal's foreground job has; a job started in the background by a
    non-interactive shell (as test runners may be) inherits SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _until_tool_runs(process: subprocess.Popen[str]) -> None:
    """Read the run's ``--events`` lines until its bash tool call has started."""
    assert process.stdout is not None
    for line in process.stdout:
        event: dict[str, Any] = json.loads(line)
        if event.get("kind") == "tool_call" and event.get("tool") == "bash":
            return
    raise AssertionError(f"the run ended before its tool call: {process.wait()}")


@pytest.mark.parametrize("ending", [signal.SIGINT, signal.SIGKILL], ids=["sigint", "sigkill"])
def test_a_run_ended_mid_tool_call_takes_its_server_along(tmp_path: Path, ending: signal.Signals) -> None:
    port = reusable_port()
    env = _env(port)
    go = tmp_path / "go"
    first = write_script(
        tmp_path,
        [
            calls(tool_call("bash", "b1", command=f"while [ ! -e {go} ]; do sleep 0.05; done; echo went")),
            calls(
                tool_call(
                    "ask_clarification",
                    "ask1",
                    question="Which colour?",
                    clarification_type="approach_choice",
                    options=["red", "blue"],
                )
            ),
            answer("All blue."),
        ],
    )
    second = write_script(tmp_path, [answer("Second run done.")])
    run = subprocess.Popen(
        [sys.executable, "-m", "workers.cli", "run", "paint it", "--thread", "t1", "--model", first, "--events"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
        preexec_fn=_as_from_a_terminal,
    )
    try:
        _until_tool_runs(run)
        guard, guard_started = json.loads((tmp_path / ".hartflow" / OWNER_FILE).read_text())["guard"]
        run.send_signal(ending)
        code = run.wait(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert code == (130 if ending == signal.SIGINT else -signal.SIGKILL)
    _wait_gone(guard, guard_started)
    assert not port_answers("127.0.0.1", port), "the embedded server outlived its command"
    go.touch()  # the tool, tried again by the next command's worker, now finishes

    status = _hartflow(tmp_path, env, "status", "t1", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["status"] in ("running", "awaiting_input")
    assert "Traceback" not in status.stderr

    followed = _hartflow(tmp_path, env, "events", "t1", "--follow")
    assert followed.returncode == 0, followed.stderr + _histories(tmp_path / ".hartflow", port)
    assert json.loads(followed.stdout.splitlines()[-1])["kind"] == "awaiting_input"

    replied = _hartflow(tmp_path, env, "reply", "t1", "--option", "2", "--json")
    assert replied.returncode == 0, replied.stderr
    assert json.loads(replied.stdout)["final_message"] == "All blue."

    again = _hartflow(tmp_path, env, "run", "once more", "--thread", "t1", "--model", second, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["final_message"] == "Second run done."

    finished = _hartflow(tmp_path, env, "status", "t1", "--json")
    assert finished.returncode == 0, finished.stderr
    view = json.loads(finished.stdout)
    assert view["status"] == "completed"
    assert {"ThreadData", "Clarification"} <= set(view["chain"])  # from the run's archive, no worker asked
    assert not port_answers("127.0.0.1", port)
    assert not (tmp_path / ".hartflow" / OWNER_FILE).exists()


def test_a_server_left_behind_by_this_homes_stack_is_stopped_not_waited_on(tmp_path: Path) -> None:
    port = reusable_port()
    home = tmp_path / ".hartflow"
    leftover = DevServer(DevServerOptions(db_file=home / "temporal.db", port=port, ui=False))
    leftover.start()
    try:
        assert leftover.pid is not None
        # As a stack whose command is gone would have left it: the owner is a process that no longer exists.
        owner = {"port": port, "owner": [leftover.pid, "0"], "guard": [leftover.pid, _started(leftover.pid)]}
        (home / OWNER_FILE).write_text(json.dumps(owner))
        status = _hartflow(tmp_path, _env(port), "status", "never-started")
        assert status.returncode == 2, status.stderr
        assert status.stderr.strip() == "hartflow: error: unknown thread never-started: no run has been started on it"
        assert not leftover.running, "the left-behind server was not stopped"
    finally:
        leftover.stop()


def _histories(home: Path, port: int) -> str:
    """The home's run histories in brief (one line per event: id, time, type, activity or marker or update, worker),
    for a failure message: the commands' servers are gone, so a nondeterminism error names events nobody can see."""

    async def brief() -> str:
        client = await Client.connect(f"127.0.0.1:{port}")
        lines = []
        async for execution in client.list_workflows('WorkflowType = "HartflowRun"'):
            lines.append(f"-- {execution.id} {execution.run_id}")
            async for event in client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history_events():
                lines.append(f"{event.event_id} {event.event_time.ToDatetime().time()} {_event_brief(event)}")
        return "\n".join(lines)

    with DevServer(DevServerOptions(db_file=home / "temporal.db", port=port, ui=False)):
        return "\n" + asyncio.run(brief())


def _event_brief(event: Any) -> str:
    kind = event.WhichOneof("attributes") or ""
    attributes = getattr(event, kind) if kind else None
    parts = [kind.removesuffix("_event_attributes")]
    if hasattr(attributes, "activity_type"):
        parts.append(attributes.activity_type.name)
    if hasattr(attributes, "marker_name"):
        parts.append(attributes.marker_name)
    if hasattr(attributes, "accepted_request"):
        parts.append(attributes.accepted_request.input.name)
    if hasattr(attributes, "failure") and attributes.HasField("failure"):
        parts.append(f"failure: {attributes.failure.message}")
    parts.append(getattr(attributes, "identity", ""))
    return " ".join(part for part in parts if part)
