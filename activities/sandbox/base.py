"""The sandbox provider interface every backend (local directories, Kubernetes pods) implements.

Paths crossing this interface are always virtual (``/mnt/user-data/...``), in both directions: the model
only ever sees the paths it would see inside a container, whichever backend runs the tool.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass


class SandboxError(Exception):
    """A failure the model caused and can act on (bad path, missing file, ...).

    The tool layer turns it into an ``Error: <message>`` tool result instead of failing the activity, so
    the message must make sense to the model and must not mention host paths.
    """


@dataclass(frozen=True)
class GrepMatch:
    path: str
    """Virtual path of the file."""
    line_number: int
    """1-based."""
    line: str
    """The matching line, without its line break, shortened to 200 characters."""


class Sandbox(ABC):
    """One thread's execution environment, seen through virtual paths."""

    @abstractmethod
    def execute_command(self, command: str, timeout: float | None = None) -> str:
        """Run ``command`` with bash in the workspace; ``timeout=None`` means the provider's default.

        Returns the combined report the model reads (stdout, stderr, exit status), never raises for a
        failing command: a non-zero exit is information for the model, not an error of the tool.
        """

    @abstractmethod
    def read_file(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        """The whole text, byte-exact; or lines ``start_line..end_line`` (1-based, inclusive) joined by
        ``\\n``."""

    @abstractmethod
    def write_file(self, path: str, content: str, append: bool = False) -> None:
        """Create parent directories as needed; overwrite unless ``append``."""

    @abstractmethod
    def list_dir(self, path: str, max_depth: int = 2) -> list[str]:
        """Sorted entries up to ``max_depth`` levels below ``path``; directories end with ``/``."""

    @abstractmethod
    def glob(self, path: str, pattern: str, include_dirs: bool = False, max_results: int = 200) -> list[str]:
        """At most ``max_results`` paths under ``path`` matching ``pattern``.

        Callers that need to know whether results were cut ask for one more than they show.
        """

    @abstractmethod
    def grep(
        self,
        path: str,
        pattern: str,
        glob: str | None = None,
        literal: bool = False,
        case_sensitive: bool = False,
        max_results: int = 100,
    ) -> list[GrepMatch]:
        """At most ``max_results`` lines matching the regular expression (or literal text) ``pattern``.

        ``path`` may be a file or a directory; ``glob`` filters files by their path relative to ``path``.
        """

    def str_replace(self, path: str, old_str: str, new_str: str, replace_all: bool = False) -> str:
        """Replace ``old_str`` and return the confirmation the model sees.

        Built on ``read_file``/``write_file`` so every backend gets the same uniqueness rule; a backend
        overrides it only to make the read-modify-write atomic.
        """
        content = self.read_file(path)
        if not old_str:
            # str.replace("", x) would insert x between every character; DeerFlow treats it as a no-op.
            return "OK"
        count = content.count(old_str)
        if count == 0:
            raise SandboxError(f"String to replace not found in file: {path}")
        if count > 1 and not replace_all:
            raise SandboxError(
                f"String to replace occurs {count} times in file: {path}. Include more surrounding "
                "context to make it unique, or set replace_all to true."
            )
        self.write_file(
            path, content.replace(old_str, new_str) if replace_all else content.replace(old_str, new_str, 1)
        )
        return "OK"


class SandboxProvider(ABC):
    """Hands out sandboxes by id, so the id can live in thread state and outlive the worker process."""

    uses_thread_data_mounts: bool
    """Whether the thread's host directories are the sandbox's ``/mnt/user-data`` (so a worker can write
    outputs on the host instead of through the sandbox)."""
    needs_release: bool = True
    """Whether :meth:`release` frees anything: tool results say so, and a run whose sandbox's provider holds
    nothing for it skips the ``sandbox.release`` activity at its end (``middlewares/sandbox.py``)."""

    @abstractmethod
    def acquire(self, user_id: str, thread_id: str, *, run_key: str = "") -> str:
        """Return the thread's sandbox id, creating the sandbox if needed; calling it again is harmless.

        ``run_key`` is the acquiring run's workflow id; providers that create resources label them with it.
        """

    @abstractmethod
    def sandbox_id_for(self, user_id: str, thread_id: str) -> str:
        """The id :meth:`acquire` gives the thread, computed without creating or checking anything."""

    @abstractmethod
    def get(self, sandbox_id: str) -> Sandbox | None:
        """The live sandbox for ``sandbox_id``, or ``None`` when it must be (re-)acquired.

        Cheap enough to call on every tool call; must not create anything.
        """

    @abstractmethod
    def release(self, sandbox_id: str) -> None:
        """End this run's use of the sandbox; releasing an unknown or released id is a no-op."""


class CancelScope:
    """Cancellation of blocking sandbox work, reaching into the thread it runs in.

    A tool activity runs the sandbox's blocking calls in a worker thread; cancelling the activity cancels only
    the coroutine awaiting that thread. The activity therefore sets a scope (:data:`CURRENT_CANCEL_SCOPE`, which
    ``asyncio.to_thread`` copies into the thread) and cancels it: a sandbox that started a process registers how
    to stop it, so a cancelled run leaves no command running.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stops: list[Callable[[], None]] = []
        self.cancelled = False

    def on_cancel(self, stop: Callable[[], None]) -> Callable[[], None]:
        """Call ``stop`` when the scope is cancelled (at once if it already was); returns the unregistering call."""
        with self._lock:
            if not self.cancelled:
                self._stops.append(stop)
                return lambda: self._discard(stop)
        stop()
        return lambda: None

    def _discard(self, stop: Callable[[], None]) -> None:
        with self._lock:
            if stop in self._stops:
                self._stops.remove(stop)

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            stops, self._stops = self._stops, []
        for stop in stops:
            stop()


CURRENT_CANCEL_SCOPE: ContextVar[CancelScope | None] = ContextVar("sandbox_cancel_scope", default=None)


@dataclass(frozen=True)
class ToolAttempt:
    """Which attempt of which tool call the sandbox work in this context runs for.

    Set by the tool activity (:data:`CURRENT_TOOL_ATTEMPT`, copied into the thread like the cancel scope): a local
    sandbox kills the command of an earlier attempt still running before it starts the next one.
    """

    call: str
    """The same on every attempt of the call: its workflow run and activity id."""
    number: int


CURRENT_TOOL_ATTEMPT: ContextVar[ToolAttempt | None] = ContextVar("sandbox_tool_attempt", default=None)
