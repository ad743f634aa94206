"""The local provider: a thread's sandbox is its host directories, DeerFlow's ``LocalSandboxProvider``.

It confines file tools to the thread's ``user-data`` directory but is no security boundary for bash,
which is why host bash is off unless the deployment is fully trusted.

Confinement: a virtual path is resolved (links *within* the three folders are followed, as DeerFlow's are) and
must land in one of the three folders at their expected place below the trusted anchor (the home, or the pod's
``/mnt/user-data``), never where a linked ``user-data`` or thread folder points. ``read_file`` and
``write_file`` then open that resolved path one component at a time without following a link
(``activities/no_follow.py``), so a link swapped in after the check is refused rather than followed.
"""

from __future__ import annotations

import fnmatch
import os
import re
import signal
import subprocess
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from pathlib import Path, PurePosixPath
from typing import IO, Protocol

from activities import no_follow
from activities.no_follow import PathEscapeError
from activities.paths import USER_DATA_DIRS, VIRTUAL_PATH_PREFIX, InvalidIdError, ThreadPaths
from activities.sandbox.base import (
    CURRENT_CANCEL_SCOPE,
    CURRENT_TOOL_ATTEMPT,
    GrepMatch,
    Sandbox,
    SandboxError,
    SandboxProvider,
)
from activities.sandbox.command_ledger import CommandLedger, dies_with_worker
from vocabulary.text import clip

LOCAL_HOST_BASH_DISABLED_MESSAGE = (
    "Host bash execution is disabled for LocalSandboxProvider because it is not a secure sandbox boundary. "
    "Switch to AioSandboxProvider for isolated bash access, or set sandbox.allow_host_bash: true only in a "
    "fully trusted local environment."
)

_CACHE_SIZE = 256
COMMAND_LEDGER_DIR = "sandbox-commands"
"""Under the hartflow home: the bash commands running on it (``command_ledger.py``)."""
_SECRET_NAME_MARKERS = ("KEY", "SECRET", "TOKEN", "PASSWORD")
_CAPTURE_LIMIT_BYTES = 10 * 1024 * 1024
_DRAIN_GRACE_SECONDS = 1.0
"""How long to keep reading after the shell exits: ``server &`` inherits the pipes and never closes them."""
_GREP_MAX_FILE_BYTES = 1_000_000
_GREP_LINE_CHARS = 200
_GREP_MAX_LINE_CHARS = _GREP_LINE_CHARS * 10
"""Longer lines (minified files) are skipped so a user regex cannot backtrack through megabytes."""

# DeerFlow's IGNORE_PATTERNS: ls/glob/grep never descend into tool caches and build output.
_IGNORED_NAMES = frozenset(
    {
        ".git", ".svn", ".hg", ".bzr", "node_modules", "__pycache__", ".venv", "venv", ".env", "env", ".tox",
        ".nox", ".eggs", "site-packages", "dist", "build", ".next", ".nuxt", ".output", ".turbo", "target",
        "out", ".idea", ".vscode", ".project", ".classpath", ".settings", ".DS_Store", "Thumbs.db",
        "desktop.ini", ".cache", "logs", ".coverage", "coverage", ".nyc_output", "htmlcov", ".pytest_cache",
        ".mypy_cache", ".ruff_cache",
    }
)  # fmt: skip
_IGNORED_GLOBS = re.compile(
    "|".join(
        fnmatch.translate(p)
        for p in ("*.egg-info", "*.swp", "*.swo", "*~", "*.lnk", "*.log", "*.tmp", "*.temp", ".upload-*.part",
                  "*.bak", "*.cache")
    )
)  # fmt: skip


def _ignored(name: str) -> bool:
    return name in _IGNORED_NAMES or _IGNORED_GLOBS.match(name) is not None


def _path_matches(pattern: str, rel_path: str) -> bool:
    """DeerFlow's glob rule: a pattern without ``/`` matches the basename at any depth; any other pattern
    is anchored at the search root, with ``**`` spanning zero or more whole segments."""
    if "/" not in pattern:
        return fnmatch.fnmatchcase(PurePosixPath(rel_path).name, pattern)
    parts = PurePosixPath(rel_path).parts
    reachable = {0}
    for part in PurePosixPath(pattern).parts:
        if part == "**":
            reachable = set(range(min(reachable), len(parts) + 1))
        else:
            reachable = {i + 1 for i in reachable if i < len(parts) and fnmatch.fnmatchcase(parts[i], part)}
        if not reachable:
            return False
    return len(parts) in reachable


@contextmanager
def _user_errors(path: str) -> Iterator[None]:
    """Turn the OS errors a model can cause into ``SandboxError``s that name the virtual path only."""
    try:
        yield
    except FileNotFoundError:
        raise SandboxError(f"File not found: {path}") from None
    except IsADirectoryError:
        raise SandboxError(f"Path is a directory, not a file: {path}") from None
    except (NotADirectoryError, FileExistsError):  # FileExistsError: a parent to create is a file
        raise SandboxError(f"Path is not a directory: {path}") from None
    except PermissionError:
        raise SandboxError(f"Permission denied: {path}") from None
    except PathEscapeError:  # a link swapped in after the path was resolved
        raise SandboxError("Access denied: path traversal detected") from None
    except UnicodeDecodeError:
        raise SandboxError(
            f"cannot read '{path}' as text — it appears to be a binary file (e.g. .xlsx, .pdf, or an image). "
            "read_file only supports UTF-8 text. Use bash with a suitable library instead."
        ) from None


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


class UserDataLayout(Protocol):
    """Where ``/mnt/user-data`` is on this machine: a thread's directories under the hartflow home (the
    local provider's :class:`ThreadPaths`), or the pod's own ``/mnt/user-data`` (the sandbox server).
    ``anchor`` is the trusted folder ``user_data`` is below (or is): no link under it is trusted."""

    @property
    def anchor(self) -> Path: ...

    @property
    def user_data(self) -> Path: ...

    @property
    def workspace(self) -> Path: ...


class LocalSandbox(Sandbox):
    """A thread's ``user-data`` directory seen as ``/mnt/user-data``.

    Holds no state of its own beyond the thread's paths, so any worker can rebuild it from the sandbox id.
    """

    def __init__(
        self,
        paths: UserDataLayout,
        *,
        allow_host_bash: bool,
        bash_timeout: float,
        file_lock: threading.RLock,
        capture_limit_bytes: int = _CAPTURE_LIMIT_BYTES,
        commands: CommandLedger | None = None,
    ) -> None:
        """``commands``: where running commands are recorded for the next worker to kill should this one die
        mid-command; ``None`` where nothing outlives the process (a pod's sandbox server is its PID 1)."""
        self._paths = paths
        # Only the anchor is resolved: a linked user-data or thread folder does not move the root along.
        self._anchor = Path(os.path.realpath(paths.anchor))
        self._root = self._anchor / paths.user_data.relative_to(paths.anchor)
        self._allow_host_bash = allow_host_bash
        self._bash_timeout = bash_timeout
        self._file_lock = file_lock
        self._capture_limit = capture_limit_bytes
        self._commands = commands
        spellings = sorted({str(paths.user_data), str(self._root)}, key=len, reverse=True)
        # Longest spelling first: a symlinked home makes one spelling a substring of the other.
        self._host_in_output = re.compile("|".join(re.escape(s) + r"(?![\w.-])" for s in spellings))
        self._virtual_in_command = re.compile(re.escape(VIRTUAL_PATH_PREFIX) + r"(?=/|$|[\s\"'`;&|<>()])")

    # -- paths -----------------------------------------------------------------------------------------

    def _resolve(self, path: str, *, allow_root: bool = False) -> Path:
        """Map a virtual path to the host, rejecting anything that would leave the thread's directories.

        ``allow_root`` admits ``/mnt/user-data`` itself, for listings and searches that only read.
        """
        if path != VIRTUAL_PATH_PREFIX and not path.startswith(f"{VIRTUAL_PATH_PREFIX}/"):
            raise SandboxError(f"Only paths under {VIRTUAL_PATH_PREFIX}/ are allowed: {path}")
        relative = path[len(VIRTUAL_PATH_PREFIX) :].strip("/")
        if ".." in relative.split("/") or "\0" in relative:
            raise SandboxError("Access denied: path traversal detected")
        top = relative.split("/", 1)[0]
        if top not in USER_DATA_DIRS and not (allow_root and top == ""):
            dirs = ", ".join(f"{VIRTUAL_PATH_PREFIX}/{d}" for d in USER_DATA_DIRS)
            raise SandboxError(f"Only paths under {dirs} are allowed: {path}")
        host = Path(os.path.realpath(self._root / relative))
        roots = [self._root] if top == "" else [self._root / d for d in USER_DATA_DIRS]
        if not any(host.is_relative_to(root) for root in roots):
            raise SandboxError("Access denied: path traversal detected")
        return host

    def _open(self, host: Path, flags: int, *, create_folders: bool = False) -> int:
        """A descriptor of the resolved ``host`` path, opened from the anchor without following a link."""
        relative = host.relative_to(self._anchor).as_posix()
        return no_follow.open_file(self._anchor, relative, flags, create_folders=create_folders)

    def _virtual(self, host: Path) -> str:
        relative = host.relative_to(self._root).as_posix()
        return VIRTUAL_PATH_PREFIX if relative == "." else f"{VIRTUAL_PATH_PREFIX}/{relative}"

    def _inside(self, host: Path) -> bool:
        return Path(os.path.realpath(host)).is_relative_to(self._root)

    # -- bash ------------------------------------------------------------------------------------------

    def execute_command(self, command: str, timeout: float | None = None) -> str:
        """Run ``bash -c`` in the workspace with virtual paths rewritten to host paths and back.

        The report is stdout, then ``\\nStd Error:\\n`` and stderr (stderr alone when stdout is empty),
        then ``\\nExit Code: N`` for a non-zero exit; a timeout kills the whole process group and reports
        a notice plus ``Exit Code: 124``. Empty output reads ``(no output)``. The environment is the
        worker's minus variables whose names contain KEY, SECRET, TOKEN or PASSWORD. The shell dies with the
        worker; what it started is killed by the home's next worker, or by the tool call's next attempt
        (``command_ledger.py``).
        """
        if not self._allow_host_bash:
            raise SandboxError(LOCAL_HOST_BASH_DISABLED_MESSAGE)
        self._paths.workspace.mkdir(parents=True, exist_ok=True)  # a command may have deleted it
        timeout = self._bash_timeout if timeout is None else timeout
        host_command = self._virtual_in_command.sub(lambda _: str(self._root), command)
        with self._recorded() as marker:
            process = subprocess.Popen(
                ["bash", "-c", host_command],
                cwd=self._paths.workspace,
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
            stdout = _PipeReader(process.stdout, self._capture_limit)
            stderr = _PipeReader(process.stderr, self._capture_limit)
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
        return self._host_in_output.sub(VIRTUAL_PATH_PREFIX, output or "(no output)")

    def _recorded(self) -> AbstractContextManager[dict[str, str]]:
        """The command's entry in the ledger while it runs (the environment variables marking it), if any."""
        if self._commands is None:
            return nullcontext({})
        return self._commands.running(CURRENT_TOOL_ATTEMPT.get())

    # -- files -----------------------------------------------------------------------------------------

    def read_file(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        host = self._resolve(path)
        with _user_errors(path):
            if start_line is None and end_line is None:
                # newline="" keeps CRLF intact, so str_replace's read-modify-write is byte-faithful.
                with open(self._open(host, os.O_RDONLY), encoding="utf-8", newline="") as f:
                    return f.read()
            start = max(start_line or 1, 1)
            selected: list[str] = []
            with open(self._open(host, os.O_RDONLY), encoding="utf-8") as f:
                for number, line in enumerate(f, start=1):
                    if end_line is not None and number > end_line:
                        break
                    if number >= start:
                        selected.append(line.rstrip("\r\n"))
            return "\n".join(selected)

    def write_file(self, path: str, content: str, append: bool = False) -> None:
        host = self._resolve(path)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
        with self._file_lock, _user_errors(path):
            descriptor = self._open(host, flags, create_folders=True)
            with open(descriptor, "a" if append else "w", encoding="utf-8", newline="") as f:
                f.write(content)

    def str_replace(self, path: str, old_str: str, new_str: str, replace_all: bool = False) -> str:
        # Parallel tool calls of one turn may edit the same file; serialise the read-modify-write.
        with self._file_lock:
            return super().str_replace(path, old_str, new_str, replace_all)

    # -- listing and search ----------------------------------------------------------------------------

    def _directory(self, path: str) -> Path:
        root = self._resolve(path, allow_root=True)
        if not root.is_dir():
            raise SandboxError(f"Path is not a directory: {path}" if root.exists() else f"Directory not found: {path}")
        return root

    def list_dir(self, path: str, max_depth: int = 2) -> list[str]:
        root = self._directory(path)
        entries: list[str] = []

        def walk(directory: Path, depth: int) -> None:
            try:
                children = list(directory.iterdir())
            except PermissionError:
                return
            for child in children:
                if _ignored(child.name) or not self._inside(child):
                    continue
                is_dir = child.is_dir()
                entries.append(self._virtual(child) + ("/" if is_dir else ""))
                if is_dir and not child.is_symlink() and depth < max_depth:
                    walk(child, depth + 1)

        walk(root, 1)
        return sorted(entries)

    def _walk_files(self, root: Path, *, include_dirs: bool = False) -> Iterator[tuple[Path, str]]:
        """Yield ``(host path, path relative to root)`` for every searchable entry below ``root``."""
        for current, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not _ignored(d))
            base = Path(current)
            names = [*dirs, *sorted(files)] if include_dirs else sorted(files)
            for name in names:
                if not _ignored(name):
                    yield base / name, (base / name).relative_to(root).as_posix()

    def glob(self, path: str, pattern: str, include_dirs: bool = False, max_results: int = 200) -> list[str]:
        root = self._directory(path)
        matches: list[str] = []
        for host, rel in self._walk_files(root, include_dirs=include_dirs):
            if len(matches) >= max_results:
                break
            if _path_matches(pattern, rel):
                matches.append(self._virtual(host))
        return matches

    def grep(
        self,
        path: str,
        pattern: str,
        glob: str | None = None,
        literal: bool = False,
        case_sensitive: bool = False,
        max_results: int = 100,
    ) -> list[GrepMatch]:
        root = self._resolve(path, allow_root=True)
        try:
            regex = re.compile(re.escape(pattern) if literal else pattern, 0 if case_sensitive else re.IGNORECASE)
        except re.error as e:
            raise SandboxError(f"Invalid regex pattern: {e}") from None
        if root.is_file():
            candidates: Iterator[tuple[Path, str]] = iter([(root, root.name)])
        elif root.is_dir():
            candidates = self._walk_files(root)
        else:
            raise SandboxError(f"Directory not found: {path}")

        matches: list[GrepMatch] = []
        for host, rel in candidates:
            if glob is not None and not _path_matches(glob, rel):
                continue
            for number, line in self._searchable_lines(host, explicit=host == root):
                if regex.search(line):
                    if len(matches) >= max_results:
                        return matches
                    text = clip(line.rstrip("\r\n"), _GREP_LINE_CHARS)
                    matches.append(GrepMatch(self._virtual(host), number, text))
        return matches

    def _searchable_lines(self, host: Path, *, explicit: bool) -> Iterator[tuple[int, str]]:
        """Lines of a text file worth searching: binary, huge and (unless asked for) symlinked files have
        none."""
        try:
            if (not explicit and host.is_symlink()) or host.stat().st_size > _GREP_MAX_FILE_BYTES:
                return
            with host.open("rb") as f:
                if b"\0" in f.read(8192):
                    return
            with host.open(encoding="utf-8", errors="replace") as f:
                for number, line in enumerate(f, start=1):
                    if len(line) <= _GREP_MAX_LINE_CHARS:
                        yield number, line
        except OSError:
            return


class LocalSandboxProvider(SandboxProvider):
    """Sandbox ids ``local:{user_id}:{thread_id}`` name the thread, so ``get`` works in any worker process."""

    uses_thread_data_mounts = True

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
