"""A thread's sandbox on the local provider (``activities/sandbox/local.py``): its host directories seen as
``/mnt/user-data``.

It confines file tools to the thread's ``user-data`` directory but is no security boundary for bash,
which is why host bash is off unless the deployment is fully trusted.

Confinement: a virtual path is resolved (links *within* the three folders are followed, as DeerFlow's are) and
must land in one of the three folders at their expected place below the trusted anchor (the home, or the pod's
``/mnt/user-data``), never where a linked ``user-data`` or thread folder points. ``read_file`` and
``write_file`` then open that resolved path one component at a time without following a link
(``activities/no_follow.py``), so a link swapped in after the check is refused rather than followed.

Its bash commands run as ``activities/sandbox/host_command.py`` runs them; listings and searches follow
``activities/sandbox/host_search.py``.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Protocol

from activities import no_follow
from activities.no_follow import PathEscapeError
from activities.paths import USER_DATA_DIRS, VIRTUAL_PATH_PREFIX
from activities.sandbox.base import (
    CURRENT_TOOL_ATTEMPT,
    GrepMatch,
    Sandbox,
    SandboxError,
)
from activities.sandbox.command_ledger import CommandLedger
from activities.sandbox.host_command import CAPTURE_LIMIT_BYTES, run_bash
from activities.sandbox.host_search import GREP_LINE_CHARS, ignored, path_matches, searchable_lines, walk_files
from vocabulary.text import clip

LOCAL_HOST_BASH_DISABLED_MESSAGE = (
    "Host bash execution is disabled for LocalSandboxProvider because it is not a secure sandbox boundary. "
    "Switch to AioSandboxProvider for isolated bash access, or set sandbox.allow_host_bash: true only in a "
    "fully trusted local environment."
)


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
        capture_limit_bytes: int = CAPTURE_LIMIT_BYTES,
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
            output = run_bash(host_command, self._paths.workspace, marker, timeout, self._capture_limit)
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
                if ignored(child.name) or not self._inside(child):
                    continue
                is_dir = child.is_dir()
                entries.append(self._virtual(child) + ("/" if is_dir else ""))
                if is_dir and not child.is_symlink() and depth < max_depth:
                    walk(child, depth + 1)

        walk(root, 1)
        return sorted(entries)

    def glob(self, path: str, pattern: str, include_dirs: bool = False, max_results: int = 200) -> list[str]:
        root = self._directory(path)
        matches: list[str] = []
        for host, rel in walk_files(root, include_dirs=include_dirs):
            if len(matches) >= max_results:
                break
            if path_matches(pattern, rel):
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
            candidates = walk_files(root)
        else:
            raise SandboxError(f"Directory not found: {path}")

        matches: list[GrepMatch] = []
        for host, rel in candidates:
            if glob is not None and not path_matches(glob, rel):
                continue
            for number, line in searchable_lines(host, explicit=host == root):
                if regex.search(line):
                    if len(matches) >= max_results:
                        return matches
                    text = clip(line.rstrip("\r\n"), GREP_LINE_CHARS)
                    matches.append(GrepMatch(self._virtual(host), number, text))
        return matches
