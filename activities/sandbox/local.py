"""The local provider: a thread's sandbox is its host directories, DeerFlow's ``LocalSandboxProvider``.

It is no security boundary for bash, which is why host bash is off unless the deployment is fully trusted. The
sandbox itself, its confinement of the file tools included, is ``activities/sandbox/local_sandbox.py``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path

from activities.no_follow import PathEscapeError
from activities.paths import InvalidIdError, ThreadPaths
from activities.sandbox.base import Sandbox, SandboxError, SandboxProvider
from activities.sandbox.command_ledger import CommandLedger
from activities.sandbox.local_sandbox import LocalSandbox

_CACHE_SIZE = 256
COMMAND_LEDGER_DIR = "sandbox-commands"
"""Under the hartflow home: the bash commands running on it (``command_ledger.py``)."""


class LocalSandboxProvider(SandboxProvider):
    """Sandbox ids ``local:{user_id}:{thread_id}`` name the thread, so ``get`` works in any worker process."""

    uses_thread_data_mounts = True
    needs_release = False  # the thread's folders stay; release only drops a cache entry the LRU bounds anyway

    def __init__(self, home: Path, *, allow_host_bash: bool = False, bash_timeout: float = 600) -> None:
        self._home = home
        self._commands = CommandLedger(home / COMMAND_LEDGER_DIR)
        self._allow_host_bash = allow_host_bash
        self._bash_timeout = bash_timeout
        self._sandboxes: OrderedDict[str, LocalSandbox] = OrderedDict()
        self._lock = threading.Lock()
        self._file_lock = threading.RLock()

    def acquire(self, user_id: str, thread_id: str, *, run_key: str = "") -> str:
        try:
            paths = ThreadPaths(self._home, user_id, thread_id)
        except InvalidIdError as e:
            raise SandboxError(str(e)) from None
        try:
            paths.ensure_dirs()
        except PathEscapeError as e:  # a link left in the thread's folders: nothing is created through it
            raise SandboxError(f"The thread's folders cannot be used: {e}") from None
        sandbox_id = self.sandbox_id_for(user_id, thread_id)
        self._remember(sandbox_id, paths)
        return sandbox_id

    def sandbox_id_for(self, user_id: str, thread_id: str) -> str:
        return f"local:{user_id}:{thread_id}"

    def get(self, sandbox_id: str) -> Sandbox | None:
        with self._lock:
            if (cached := self._sandboxes.get(sandbox_id)) is not None:
                self._sandboxes.move_to_end(sandbox_id)
                return cached
        kind, _, rest = sandbox_id.partition(":")
        user_id, _, thread_id = rest.partition(":")
        if kind != "local":
            return None
        try:
            paths = ThreadPaths(self._home, user_id, thread_id)
        except InvalidIdError:
            return None
        # Never acquired (or wiped): acquire must create the directories first.
        if not paths.user_data.is_dir():
            return None
        return self._remember(sandbox_id, paths)

    def kill_orphaned_commands(self) -> None:
        """Kill what bash commands of a worker that died on this home left running (call it at a worker's start)."""
        self._commands.kill_orphans()

    def release(self, sandbox_id: str) -> None:
        """Nothing to tear down locally (DeerFlow's Local release is a no-op); only the cache entry goes."""
        with self._lock:
            self._sandboxes.pop(sandbox_id, None)

    def _remember(self, sandbox_id: str, paths: ThreadPaths) -> LocalSandbox:
        sandbox = LocalSandbox(
            paths,
            allow_host_bash=self._allow_host_bash,
            bash_timeout=self._bash_timeout,
            file_lock=self._file_lock,
            commands=self._commands,
        )
        with self._lock:
            self._sandboxes[sandbox_id] = sandbox
            self._sandboxes.move_to_end(sandbox_id)
            while len(self._sandboxes) > _CACHE_SIZE:
                self._sandboxes.popitem(last=False)
        return sandbox
