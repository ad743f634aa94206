"""A local sandbox's bash command never outlives its worker (issue 19), on real processes: the shell dies with the
worker that started it, what the shell started is killed when a worker next starts on the home, and a retried
tool call's command never runs beside the attempt before it (``activities/sandbox/command_ledger.py``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.paths import ThreadPaths
from activities.sandbox.base import CURRENT_TOOL_ATTEMPT, Sandbox, ToolAttempt
from activities.sandbox.command_ledger import MARKER_VARIABLE, CommandLedger, dies_with_worker
from activities.sandbox.local import COMMAND_LEDGER_DIR, LocalSandboxProvider
from tests.support import start_run
from tests.support.faults import process_alive, wait_for_exit
from workers.testing import answer, calls, make_config, tool_call, write_script
from workers.testing.processes import POLL_SECONDS, REPO, kill_hard, wait_for_file, worker_process

pytestmark = pytest.mark.skipif(dies_with_worker() is None, reason="PR_SET_PDEATHSIG and /proc are Linux's")

UNTIL_GO = "while [ ! -f go ]; do sleep 0.05; done"
"""Runs until the test creates ``go`` in the workspace (as every test does at its end, however it ends)."""
SLOW = f"touch started; {UNTIL_GO}; echo done"
"""A command that is certainly running while the test acts."""


@pytest.fixture
def provider(home: Path) -> LocalSandboxProvider:
    return LocalSandboxProvider(home, allow_host_bash=True, bash_timeout=300)


@pytest.fixture
def sandbox(provider: LocalSandboxProvider) -> Sandbox:
    found = provider.get(provider.acquire("u1", "t1"))
    assert found is not None
    return found


@pytest.fixture
def workspace(home: Path) -> Path:
    return ThreadPaths(home, "u1", "t1").workspace


@pytest.fixture
def pool(workspace: Path) -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as executor:
        try:
            yield executor
        finally:
            workspace.mkdir(parents=True, exist_ok=True)
            (workspace / "go").touch()


def _wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"timed out waiting for {path}"
        time.sleep(POLL_SECONDS)


def _as_attempt(sandbox: Sandbox, command: str, attempt: ToolAttempt) -> str:
    """``command`` run the way the tool activity runs it: in a thread of its own, for ``attempt``."""
    token = CURRENT_TOOL_ATTEMPT.set(attempt)  # this pool thread's own context
    try:
        return sandbox.execute_command(command)
    finally:
        CURRENT_TOOL_ATTEMPT.reset(token)


def _spawn(*, marker: str | None) -> subprocess.Popen[bytes]:
    """``sleep 300`` in a process group of its own, carrying ``marker`` as a ledger token when given."""
    env = {k: v for k, v in os.environ.items() if k != MARKER_VARIABLE}
    if marker is not None:
        env[MARKER_VARIABLE] = marker
    return subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)


# -- the shell dies with the thread that forked it, which is the thread that waits for it ---------------------


def test_the_death_signal_follows_the_thread_that_forked_not_the_process() -> None:
    """Why the shell must be forked by the thread that waits for it: a forking thread that ends kills its child,
    however long the process lives on."""
    started: list[subprocess.Popen[bytes]] = []

    def fork() -> None:
        started.append(subprocess.Popen(["sleep", "300"], preexec_fn=dies_with_worker()))

    forker = threading.Thread(target=fork)
    forker.start()
    forker.join()
    assert started[0].wait(timeout=60) == -signal.SIGKILL


def test_a_command_outlives_other_threads_of_the_worker_ending(
    sandbox: Sandbox, workspace: Path, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    command = pool.submit(sandbox.execute_command, SLOW)
    _wait_for(workspace / "started")
    # Another executor's threads end, as an idle pool's do at shutdown, and so does a one-off thread.
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as other:
        assert [f.result() for f in [other.submit(sandbox.execute_command, "echo x") for _ in range(4)]] == ["x\n"] * 4
    one_off = threading.Thread(target=sandbox.execute_command, args=("true",))
    one_off.start()
    one_off.join()
    (workspace / "go").touch()
    assert command.result(timeout=60) == "done\n"


# -- the ledger: what a new worker and a new attempt kill ---------------------------------------------------


def _orphaned_entry(directory: Path) -> str:
    """A ledger entry whose owner died mid-command (a process that recorded one and exited without removing it):
    its token."""
    script = (
        "import json, os, sys\n"
        "from pathlib import Path\n"
        "from activities.sandbox.command_ledger import CommandLedger\n"
        "with CommandLedger(Path(sys.argv[1])).running(None) as marker:\n"
        "    print(json.dumps(marker), flush=True)\n"
        "    os._exit(0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(directory)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    token: str = json.loads(done.stdout)[MARKER_VARIABLE]
    return token


async def test_a_worker_start_kills_only_the_process_groups_that_carry_a_dead_owners_token(tmp_path: Path) -> None:
    directory = tmp_path / "ledger"
    token = _orphaned_entry(directory)
    orphan = _spawn(marker=token)
    # A group that took the orphan's place (say its id, since reused) carries no token; another carries one of
    # no entry of this ledger. Neither is the dead owner's.
    unmarked, foreign = _spawn(marker=None), _spawn(marker="f" * 32)
    try:
        CommandLedger(directory).kill_orphans()
        await wait_for_exit(orphan.pid)
        assert orphan.wait(timeout=60) == -signal.SIGKILL
        assert unmarked.poll() is None and foreign.poll() is None
        assert os.listdir(directory) == [], "the dead owner's entry is gone"
    finally:
        for process in (orphan, unmarked, foreign):
            process.kill()
            process.wait(timeout=60)


def test_a_worker_start_leaves_the_commands_of_live_workers_alone(
    home: Path, sandbox: Sandbox, workspace: Path, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    command = pool.submit(sandbox.execute_command, SLOW)
    _wait_for(workspace / "started")
    LocalSandboxProvider(home).kill_orphaned_commands()  # another worker starting on the same home
    (workspace / "go").touch()
    assert command.result(timeout=60) == "done\n"
    assert os.listdir(home / COMMAND_LEDGER_DIR) == [], "an ended command leaves no entry"


async def test_a_tool_calls_next_attempt_kills_the_earlier_attempts_command_first(
    sandbox: Sandbox, workspace: Path, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    """Wherever the earlier attempt runs and whether or not its worker lives (here: this very process), the next
    attempt of the same call never runs beside it; another call's command goes on."""
    first_command = f"({UNTIL_GO}) & echo $! > child.pid; touch first-started; wait"
    first = pool.submit(_as_attempt, sandbox, first_command, ToolAttempt("run/1", 1))
    other = pool.submit(_as_attempt, sandbox, SLOW, ToolAttempt("run/2", 1))
    _wait_for(workspace / "first-started")
    _wait_for(workspace / "started")
    child = int((workspace / "child.pid").read_text())

    assert pool.submit(_as_attempt, sandbox, "echo second", ToolAttempt("run/1", 2)).result(timeout=60) == "second\n"
    assert first.result(timeout=60).endswith("Exit Code: -9")
    await wait_for_exit(child)
    (workspace / "go").touch()
    assert other.result(timeout=60) == "done\n"


# -- a worker process SIGKILLed in the middle of a tool's command --------------------------------------------


async def test_a_command_dies_with_its_killed_worker_and_its_children_with_the_next_start(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address, run={"tool_call": {"heartbeat_seconds": 2}})
    # The first attempt records its shell and its background child, then waits for the child; a retry finds the
    # mark and finishes.
    command = (
        "echo start >> log; "
        "if [ -f started ]; then echo done >> log; exit 0; fi; "
        f"echo $$ > shell.pid; ({UNTIL_GO}) & echo $! > child.pid; touch started; wait; echo done >> log"
    )
    model = write_script(home, [calls(tool_call("bash", "slow", command=command)), answer("survived")])
    workspace = home / "users/default/threads/t-orphans/user-data/workspace"
    try:
        with worker_process(config, home.parent / "doomed.yaml") as doomed:
            handle = await start_run(client, config, "work", model=model, thread_id="t-orphans")
            await wait_for_file(workspace / "started")
            shell, child = (int((workspace / name).read_text()) for name in ("shell.pid", "child.pid"))
            kill_hard(doomed)

        await wait_for_exit(shell)
        assert process_alive(child), "the death signal reaches the shell only"
        with worker_process(config, home.parent / "restarted.yaml"):
            await wait_for_exit(child)
            final = await asyncio.wait_for(handle.result(), timeout=120)
    finally:
        if workspace.is_dir():
            (workspace / "go").touch()  # whatever the test left running ends
    restarted_log = home.parent / "restarted.log"

    assert (final.status, final.final_message) == ("completed", "survived")
    assert (workspace / "log").read_text().split() == ["start", "start", "done"], "the retried command ran once"
    assert "their worker is gone" in restarted_log.read_text(), "the restarted worker's start killed the child"
    assert os.listdir(home / COMMAND_LEDGER_DIR) == []
