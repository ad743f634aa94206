"""Listing and searching a thread's folders on the host, as the local sandbox's ``ls``, ``glob`` and ``grep`` do
(``activities/sandbox/local_sandbox.py``): DeerFlow's ignore patterns, its glob rule, and which lines of which
files a search reads.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

__all__ = ["GREP_LINE_CHARS", "ignored", "path_matches", "searchable_lines", "walk_files"]

_GREP_MAX_FILE_BYTES = 1_000_000
GREP_LINE_CHARS = 200
"""A matching line is shown clipped to this many characters."""
_GREP_MAX_LINE_CHARS = GREP_LINE_CHARS * 10
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


def ignored(name: str) -> bool:
    return name in _IGNORED_NAMES or _IGNORED_GLOBS.match(name) is not None


def path_matches(pattern: str, rel_path: str) -> bool:
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


def walk_files(root: Path, *, include_dirs: bool = False) -> Iterator[tuple[Path, str]]:
    """Yield ``(host path, path relative to root)`` for every searchable entry below ``root``."""
    for current, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not ignored(d))
        base = Path(current)
        names = [*dirs, *sorted(files)] if include_dirs else sorted(files)
        for name in names:
            if not ignored(name):
                yield base / name, (base / name).relative_to(root).as_posix()


def searchable_lines(host: Path, *, explicit: bool) -> Iterator[tuple[int, str]]:
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
