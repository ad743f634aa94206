"""A bash command on the host, as the local sandbox runs it (``activities/sandbox/local_sandbox.py``): in its own
process group and session, with the worker's environment minus its credentials, its output drained in the
background (capped, and no longer waited for once the shell exits: ``server &`` keeps the pipes open), killed with
its whole group on a timeout or when the tool call is cancelled, and dying with the worker (``command_ledger.py``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from contextlib import suppress
from pathlib import Path
from typing import IO

from activities.sandbox.base import CURRENT_CANCEL_SCOPE
from activities.sandbox.command_ledger import dies_with_worker

__all__ = ["CAPTURE_LIMIT_BYTES", "run_bash"]

_SECRET_NAME_MARKERS = ("KEY", "SECRET", "TOKEN", "PASSWORD")
CAPTURE_LIMIT_BYTES = 10 * 1024 * 1024
"""Of stdout and of stderr, kept by default; the rest is counted and discarded."""
_DRAIN_GRACE_SECONDS = 1.0
"""How long to keep reading after the shell exits: ``server &`` inherits the pipes and never closes them."""


def run_bash(command: str, cwd: Path, marker: dict[str, str], timeout: float, capture_limit: int) -> str:
    """Run ``bash -c command`` in ``cwd`` (``marker``: environment variables the command ledger knows it by); the
    report is stdout, then ``\\nStd Error:\\n`` and stderr, then the exit code or the timeout notice."""
    process = subprocess.Popen(
        ["bash", "-c", command],
        cwd=cwd,
        env={**_sandbox_env(), **marker},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, so a timeout kills the children too
        # This thread waits for the shell below, so it ends after the shell: the death signal that follows
        # it fires only when the worker dies (command_ledger.py).
        preexec_fn=dies_with_worker(),
    )
    assert process.stdout is not None and process.stderr is not None
    scope = CURRENT_CANCEL_SCOPE.get()
    forget = scope.on_cancel(lambda: _kill_group(process)) if scope is not None else lambda: None
    stdout = _PipeReader(process.stdout, capture_limit)
    stderr = _PipeReader(process.stderr, capture_limit)
    timed_out = False
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(process)
        process.wait()
    finally:
        forget()
        stdout.join(_DRAIN_GRACE_SECONDS)
        stderr.join(_DRAIN_GRACE_SECONDS)

    output, errors = stdout.text(), stderr.text()
    if errors:
        output += f"\nStd Error:\n{errors}" if output else errors
    if timed_out:
        notice = _timeout_notice(timeout)
        output += (f"\n{notice}" if output else notice) + "\nExit Code: 124"
    elif process.returncode != 0:
        output += f"\nExit Code: {process.returncode}"
    return output


def _sandbox_env() -> dict[str, str]:
    """The host environment without the worker's credentials, which a model-written command could print."""
    return {k: v for k, v in os.environ.items() if not any(m in k.upper() for m in _SECRET_NAME_MARKERS)}


class _PipeReader(threading.Thread):
    """Drains one pipe in the background so the command never blocks on a full pipe buffer and the
    caller can stop waiting for EOF when a backgrounded process keeps the pipe open."""

    def __init__(self, pipe: IO[bytes], limit: int) -> None:
        super().__init__(daemon=True)
        self._pipe = pipe
        self._limit = limit
        self._chunks: list[bytes] = []
        self._kept = 0
        self._total = 0
        self._lock = threading.Lock()
        self.start()

    def run(self) -> None:
        with self._pipe:
            while chunk := os.read(self._pipe.fileno(), 65536):
                with self._lock:
                    self._total += len(chunk)
                    kept = chunk[: max(0, self._limit - self._kept)]
                    self._chunks.append(kept)
                    self._kept += len(kept)

    def text(self) -> str:
        with self._lock:
            data, kept, total = b"".join(self._chunks), self._kept, self._total
        text = data.decode("utf-8", errors="replace")
        if total > kept:
            text += f"\n... [output truncated after {kept} of {total} bytes; remaining output discarded] ..."
        return text


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the command's process group (its own session: the command and whatever it started)."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _timeout_notice(timeout: float) -> str:
    amount = f"{timeout:g}"
    unit = "second" if timeout == 1 else "seconds"
    return (
        f"Command timed out after {amount} {unit} and was terminated. To run a long-lived process such as a "
        "web server, start it in the background and redirect its output, e.g. "
        "`your-command > /mnt/user-data/workspace/server.log 2>&1 &`."
    )
