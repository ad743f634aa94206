"""Keeps a child process (the embedded Temporal dev server) from outliving the process that started it.

    python server_guard.py WATCH_FD -- temporal server start-dev ...

The starter keeps the write end of a pipe and hands this guard the read end (``WATCH_FD``). Nothing is ever
written to it: when the starter ends, however it ends (exit, Ctrl-C, SIGKILL, a crash), the kernel closes its end,
the guard's read returns end-of-file, and the guard stops the server (SIGTERM, SIGKILL after ``GRACE_SECONDS``)
and exits. SIGTERM or SIGINT sent to the guard are passed on to the server, so stopping the guard stops it
cleanly; SIGUSR1 kills the server at once (a crash, for tests). The guard exits only once the server has. Should
the guard itself be killed, the kernel kills the server (Linux ``PR_SET_PDEATHSIG``, set in the server right
before it runs: the guard forks it while single-threaded, so the forking thread lives as long as the guard).

Why a pipe and not ``PR_SET_PDEATHSIG`` on the server directly: the death signal follows the *thread* that
forked, and the CLI starts the server from a worker thread of its event loop's executor, which may end long
before the process does. A pipe's end closes only with the last process holding it. The pipe is created
non-inheritable, so no other child of the starter (a sandboxed tool, say) keeps the server alive.

Only the standard library: the guard runs as a script, before any hartflow import.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable

GRACE_SECONDS = 10.0
_PR_SET_PDEATHSIG = 1
_PRCTL: Callable[..., int] | None
try:
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # looked up now: the child only calls it
except (OSError, AttributeError):  # not Linux: the pipe alone guards the server
    _PRCTL = None


def _die_with_guard() -> None:
    """In the server, just before it execs: killed by the kernel when the guard dies."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            server.kill()


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: server_guard.py WATCH_FD -- COMMAND...", file=sys.stderr)
        return 2
    watch_fd = int(argv[0])
    # preexec_fn is safe here: the guard has no other thread yet.
    server = subprocess.Popen(argv[2:], preexec_fn=_die_with_guard)

    def forward(signum: int, _frame: object) -> None:
        if server.poll() is None:
            server.send_signal(signum)

    def crash(_signum: int, _frame: object) -> None:
        server.kill()

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGUSR1, crash)

    def watch() -> None:
        while os.read(watch_fd, 4096):
            pass  # the starter never writes; end-of-file means it is gone
        _stop(server)

    threading.Thread(target=watch, name="watch-starter", daemon=True).start()
    return server.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
