"""Keeps a local sandbox's bash commands from outliving their worker, and a retried tool call from running its
command beside the attempt before it.

A command runs in a session of its own, so that a timeout or a cancellation can SIGKILL everything it started. But
nothing kills that session when the worker itself is SIGKILLed: the command went on, and the activity's retry on
another (or the restarted) worker ran it a second time beside it. Two mechanisms close this (Linux only; elsewhere
both do nothing and the commands behave as before):

* **The shell dies with its worker**: ``PR_SET_PDEATHSIG`` is armed in the shell just before it execs
  (:func:`dies_with_worker`). The kernel sends it when the *thread* that forked exits, not the process. That thread
  is the one that then waits for the shell (``LocalSandbox.execute_command`` blocks on it), so it cannot end while
  the shell runs; other threads ending (executor threads, pipe readers) do not matter
  (``tests/test_orphaned_commands.py`` checks both). It needs ``preexec_fn``, Python 3.11's only way to run
  something in the child before exec, despite its warning about threads: the function here calls only ``prctl``
  (looked up beforehand) and ``getppid``, taking no lock another thread could hold at the fork; besides it, the
  child runs only CPython's own after-fork reset, as for any ``preexec_fn``. (It also makes ``subprocess`` fork
  rather than vfork the worker.)

* **What the shell started is killed by the next worker**: the death signal is cleared on fork, so a shell's
  children survive it. Every running command is therefore an entry of a :class:`CommandLedger`, a directory under
  the hartflow home: one empty file per command, created before the fork (so no moment of a command goes
  unrecorded) and removed when the command ends; being empty and named at creation, no reader sees half of one. Its
  name holds a random token, the owner's pid and start time (``/proc/<pid>/stat``, so a reused pid is not
  taken for the owner) and a digest of the tool call it runs for. The token is also in the command's environment
  (:data:`MARKER_VARIABLE`), which everything the command starts inherits. A worker starting on the home kills
  the commands whose owner is gone (:meth:`CommandLedger.kill_orphans`), and the attempt > 1 of a tool call first
  kills the earlier attempts' commands on the home, whoever owns them: a retry that lands on another worker
  sharing the home before the dead one restarts, or an attempt still running on a paused worker that the server
  gave up on.

A command's processes are found by their token, never by a stored id: only process groups that have a member
carrying one of the tokens at the time of the scan are killed, so a process group id reused since is never hit.
A process that cleared its environment and whose marked group mates are all gone escapes; so do background
processes of a command that ended normally (``server &``), as they should: the command's entry goes with it.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import secrets
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from activities.sandbox.base import ToolAttempt

MARKER_VARIABLE = "HARTFLOW_SANDBOX_COMMAND"
"""Environment variable holding the command's ledger token, inherited by every process the command starts."""

_PROC = Path("/proc")
_PR_SET_PDEATHSIG = 1
_SIGKILL = int(signal.SIGKILL)
_PRCTL: Callable[..., int] | None
try:
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # looked up now: the child only calls it
except (OSError, AttributeError):  # not Linux
    _PRCTL = None

_log = logging.getLogger(__name__)


def dies_with_worker() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the kernel SIGKILL the child when the calling thread exits (``None`` off Linux).

    Should the worker die between the fork and the ``prctl``, the child is already another process's: it kills
    itself instead of running the command unwatched.
    """
    prctl = _PRCTL
    if prctl is None:
        return None
    worker = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
        if os.getppid() != worker:
            os.kill(os.getpid(), _SIGKILL)

    return arm


def _stat(pid: str | int) -> list[str] | None:
    """``/proc/<pid>/stat`` from its third field (state) on: the command name before it may hold spaces."""
    try:
        return (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22), or ``None`` for a dead or zombie process."""
    fields = _stat(pid)
    return fields[19] if fields is not None and fields[0] != "Z" else None


@dataclass(frozen=True)
class _Entry:
    token: str
    owner_pid: int
    owner_start: str
    call: str
    """Digest of the tool call (the same on every attempt), or ``-`` for a command run outside a tool call."""

    @property
    def name(self) -> str:
        return f"{self.token}.{self.owner_pid}.{self.owner_start}.{self.call}"

    @classmethod
    def parse(cls, name: str) -> _Entry | None:
        parts = name.split(".")
        if len(parts) != 4 or not parts[1].isdigit():
            return None
        return cls(parts[0], int(parts[1]), parts[2], parts[3])

    def owner_alive(self) -> bool:
        return _start_time(self.owner_pid) == self.owner_start


def _marked_groups(tokens: set[str]) -> set[int]:
    """The process groups that have a live member whose environment carries one of ``tokens``."""
    wanted = {f"{MARKER_VARIABLE}={token}".encode() for token in tokens}
    groups: set[int] = set()
    try:
        pids = [name for name in os.listdir(_PROC) if name.isdigit()]
    except FileNotFoundError:  # no /proc: nothing can be told apart, so nothing is killed
        return groups
    for pid in pids:
        try:
            environ = (_PROC / pid / "environ").read_bytes()  # empty for a zombie
        except OSError:  # gone, or another user's
            continue
        if wanted.isdisjoint(environ.split(b"\0")):
            continue
        if (fields := _stat(pid)) is not None:
            groups.add(int(fields[2]))
    return groups


class CommandLedger:
    """The commands running on one hartflow home, so that a later worker can kill those nobody waits for."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory

    @contextmanager
    def running(self, attempt: ToolAttempt | None) -> Iterator[dict[str, str]]:
        """Record a command about to start, for as long as the block runs; yields the environment variables the
        command must get. From a tool call's second attempt on, the earlier attempts' commands are killed first."""
        digest = "-" if attempt is None else hashlib.sha256(attempt.call.encode()).hexdigest()[:32]
        if attempt is not None and attempt.number > 1:
            self._kill(lambda entry: entry.call == digest, why=f"attempt {attempt.number} of their tool call started")
        pid = os.getpid()
        entry = _Entry(secrets.token_hex(16), pid, _start_time(pid) or "0", digest)
        self._directory.mkdir(parents=True, exist_ok=True)
        path = self._directory / entry.name
        path.touch(exist_ok=False)
        try:
            yield {MARKER_VARIABLE: entry.token}
        finally:
            path.unlink(missing_ok=True)  # an attempt after this one may have killed the command and removed it

    def kill_orphans(self) -> None:
        """Kill the commands whose worker is gone (at a worker's start: the home's previous worker may have been
        killed in the middle of one)."""
        self._kill(lambda entry: not entry.owner_alive(), why="their worker is gone")

    def _kill(self, doomed: Callable[[_Entry], bool], *, why: str) -> None:
        try:
            names = os.listdir(self._directory)
        except FileNotFoundError:
            return
        entries = [e for name in names if (e := _Entry.parse(name)) is not None and doomed(e)]
        if not entries:
            return
        groups = _marked_groups({e.token for e in entries})
        for group in groups:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        for entry in entries:
            (self._directory / entry.name).unlink(missing_ok=True)
        if groups:
            _log.warning("killed %d process group(s) of sandbox commands: %s", len(groups), why)
