"""hartflow processes for tests, as an operator runs them: ``hartflow worker`` in a process group of its own (to
SIGKILL), one-off ``hartflow`` commands, and the wait for a file a process writes — polled with a timeout, never
a fixed sleep."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

from workers.config import HartflowConfig

REPO = Path(__file__).resolve().parents[2]
"""The directory holding hartflow's packages: a child's ``PYTHONPATH``, so ``python -m workers.cli`` runs this
code, installed or not."""
WORKER_READY_LINE = "worker polling task queue"
"""What ``hartflow worker`` logs once it polls: from then on, killing it is killing a worker."""
POLL_SECONDS = 0.05


@contextlib.contextmanager
def worker_process(
    config: HartflowConfig, config_file: Path, *, ready_timeout: float = 60
) -> Iterator[subprocess.Popen[bytes]]:
    """``hartflow worker`` for ``config`` in a subprocess of its own process group, polling when yielded.

    Its stderr goes to ``config_file`` with the suffix ``.log`` (a file, not a pipe: a pipe nobody drains
    would block a chatty worker). On exit a still-running worker gets SIGTERM.
    """
    with worker_processes(config, [config_file], ready_timeout=ready_timeout) as [process]:
        yield process


@contextlib.contextmanager
def worker_processes(
    config: HartflowConfig, config_files: list[Path], *, ready_timeout: float = 60
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Several :func:`worker_process` workers on ``config``'s task queue, booted side by side (a worker's
    imports take seconds; booting them one after the other would add those seconds up)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARTFLOW_", "TEMPORAL_"))}
    for config_file in config_files:
        config_file.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_none=True)))
    with _polling_workers(
        [(["--config", str(config_file)], env, config_file.with_suffix(".log")) for config_file in config_files],
        cwd=None,
        ready_timeout=ready_timeout,
    ) as processes:
        yield processes


@contextlib.contextmanager
def env_worker_process(
    env: dict[str, str], cwd: Path, log_file: Path, *, ready_timeout: float = 60
) -> Iterator[subprocess.Popen[bytes]]:
    """``hartflow worker`` configured the way an operator's shell would: by ``env`` (``HARTFLOW_*``,
    ``TEMPORAL_ADDRESS``) and the working directory, with no ``--config``. Polling when yielded; stderr goes to
    ``log_file``."""
    with _polling_workers([([], env, log_file)], cwd=cwd, ready_timeout=ready_timeout) as [process]:
        yield process


@contextlib.contextmanager
def _polling_workers(
    workers: list[tuple[list[str], dict[str, str], Path]], *, cwd: Path | None, ready_timeout: float
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start one ``hartflow worker`` per ``(arguments, environment, log file)``, each in its own process group,
    and yield once every one polls. Logs go to files, not pipes: a pipe nobody drains would block a chatty
    worker. On exit a still-running worker gets SIGTERM."""
    started: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for arguments, env, log_file in workers:
            with log_file.open("wb") as log:
                process = subprocess.Popen(
                    [sys.executable, "-m", "workers.cli", "worker", *arguments],
                    cwd=cwd,
                    env={**env, "PYTHONPATH": str(REPO)},
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # its own process group, so a kill takes its children too
                )
            started.append((process, log_file))
        deadline = time.monotonic() + ready_timeout
        for process, log_file in started:
            while WORKER_READY_LINE not in log_file.read_text(errors="replace"):
                if process.poll() is not None or time.monotonic() > deadline:
                    output = log_file.read_text(errors="replace")
                    raise AssertionError(f"the worker did not start polling:\n{output}")
                time.sleep(POLL_SECONDS)
        yield [process for process, _ in started]
    finally:
        for process, _ in started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process, _ in started:
            process.wait(timeout=30)


def kill_hard(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process and its group — a crash, with no chance to finish or report anything."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def hartflow_command(cwd: Path, env: dict[str, str], *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """One ``hartflow`` command as a process of its own, as a user runs it; its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "workers.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


async def wait_for_file(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {path}")
        await asyncio.sleep(POLL_SECONDS)
