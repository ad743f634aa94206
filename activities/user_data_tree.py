"""A thread's ``user-data`` folder as a tree of files: the side of a sync that holds the files.

Two places hold a copy of a thread's ``{workspace,uploads,outputs}``: a worker's working copy under its home
(``activities/thread_files.py``, for the local sandbox on S3) and a sandbox pod's ``/mnt/user-data`` (the
sandbox server serves this very class to the worker, ``activities/sandbox/pod_files.py``). Both answer the
same questions to the one sync algorithm (``activities/thread_file_sync.py``): which files are there
(``(mtime_ns, size)`` per user-data-relative path), read one, write one atomically, delete one unless it
changed, and keep the sync manifest next to the folders.

Safety, the same in both places: a relative path is used only when it is under one of the three folders
without ``.``/``..``/empty segments; no read, write, listing or deletion follows a symlink anywhere below the
trusted anchor (the home, or the pod's ``/mnt/user-data``): not at the file, not at a folder below the three,
not at the three themselves (``outputs -> /``) nor at ``user-data`` or the thread folder
(``activities/no_follow.py`` opens each component with ``O_NOFOLLOW``). A listing never contains symlinks
(``ln -s /etc/passwd`` in the workspace uploads nothing), and a top-level folder that is a link lists nothing;
names in ``exclude`` (``storage.sync_exclude``) are neither listed nor walked into.

Stdlib only: the sandbox image runs it without third-party packages.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from pathlib import Path
from stat import S_ISREG

from activities import no_follow
from activities.no_follow import PathEscapeError
from vocabulary.paths import USER_DATA_DIRS, VIRTUAL_PATH_PREFIX, is_upload_staging_file

logger = logging.getLogger(__name__)

STAGING_SUFFIX = ".sync-tmp"
"""Suffix of half-written files (a download, a direct write or a chunked transfer before its rename)."""
_TRANSFER_ID = re.compile(r"^[0-9a-f]{32}$")

__all__ = ["STAGING_SUFFIX", "MtimeSize", "PathEscapeError", "UserDataTree", "checked_relative", "is_excluded"]

MtimeSize = tuple[int, int]
"""A file's ``(st_mtime_ns, st_size)``: what tells a sync that the file changed since it last saw it."""


def checked_relative(relative: str) -> str:
    """``relative`` when it names a file under workspace, uploads or outputs; else :class:`PathEscapeError`."""
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts) or "\0" in relative or "\\" in relative:
        raise PathEscapeError("Access denied: path traversal detected")
    if parts[0] not in USER_DATA_DIRS or len(parts) < 2:
        dirs = ", ".join(f"{VIRTUAL_PATH_PREFIX}/{d}" for d in USER_DATA_DIRS)
        raise PathEscapeError(f"Only files under {dirs} are allowed: {VIRTUAL_PATH_PREFIX}/{relative}")
    return relative


def is_excluded(relative: str, exclude: frozenset[str]) -> bool:
    return bool(exclude) and not exclude.isdisjoint(relative.split("/"))


def mtime_size(stat: os.stat_result) -> MtimeSize:
    return stat.st_mtime_ns, stat.st_size


class UserDataTree:
    """The files under ``root`` (a thread's ``user-data``), with the sync manifest at ``manifest``.

    ``anchor`` (default: ``root``) is the trusted folder both are below (the hartflow home): from it down,
    no component is followed if it is a link (``activities/no_follow.py``), so neither a linked top-level
    folder (``outputs -> /``) nor a linked ``user-data`` or thread folder leads out of the thread."""

    def __init__(self, root: Path, manifest: Path, *, anchor: Path | None = None) -> None:
        self.root = Path(root)
        self.manifest = Path(manifest)
        self.anchor = Path(anchor) if anchor is not None else self.root
        self._root = self.root.relative_to(self.anchor).as_posix().strip(".")
        self._manifest = self.manifest.relative_to(self.anchor).as_posix()

    def _below(self, relative: str) -> str:
        """``relative`` (checked) as a path below the anchor."""
        checked = checked_relative(relative)
        return f"{self._root}/{checked}" if self._root else checked

    def stat(self, relative: str) -> os.stat_result | None:
        """What is at ``relative``, not followed if a link; ``None`` when nothing is; :class:`PathEscapeError`
        when a folder on the way is a link."""
        return no_follow.lstat(self.anchor, self._below(relative))

    def refuse_links(self, relative: str) -> None:
        """:class:`PathEscapeError` when ``relative`` or a folder on its way is a link (before a write that
        goes to storage first)."""
        no_follow.refuse_links(self.anchor, self._below(relative))

    def files(self, exclude: frozenset[str] = frozenset()) -> dict[str, MtimeSize]:
        """Regular files as ``{relative: (mtime_ns, size)}``, outside excluded names (whose trees are not even
        walked); never symlinks, nor what they point at, nor half-written files (an upload's staging file, a
        transfer in progress). A top-level folder that is a link is left out whole."""
        found: dict[str, MtimeSize] = {}

        def skip(name: str) -> bool:
            return name in exclude or is_upload_staging_file(name) or name.endswith(STAGING_SUFFIX)

        for top in USER_DATA_DIRS:
            folder = f"{self._root}/{top}" if self._root else top
            try:
                listed = list(no_follow.files(self.anchor, folder, skip=skip))
            except PathEscapeError:
                logger.warning("not syncing %s: it is a symbolic link", top)
                continue
            for below, stat in listed:
                relative = below[len(self._root) + 1 :] if self._root else below
                try:
                    found[checked_relative(relative)] = mtime_size(stat)
                except PathEscapeError:
                    logger.warning("not syncing %s: the name cannot be a storage key", relative)
        return found

    def read(self, relative: str, offset: int = 0, length: int | None = None) -> bytes | None:
        """``length`` bytes (all when ``None``) from ``offset``; ``None`` when the file is gone. Never follows a
        symlink, also one swapped in after the listing."""
        return no_follow.read(self.anchor, self._below(relative), offset, length)

    def write(self, relative: str, data: bytes) -> MtimeSize:
        """Store ``data`` atomically (a reader or a sandbox command never sees half a file)."""
        written = no_follow.write_atomically(self.anchor, self._below(relative), data, staging_suffix=STAGING_SUFFIX)
        return mtime_size(written)

    def stage(self, relative: str, transfer: str, offset: int, data: bytes) -> None:
        """Write one chunk of a file transferred in several; it becomes the file at :meth:`commit`."""
        parent, staging = self._staging(relative, transfer)
        with no_follow.opened_dir(self.anchor, parent, create=offset == 0) as directory:
            if offset == 0:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(staging, dir_fd=directory)
            else:
                try:
                    found = os.stat(staging, dir_fd=directory, follow_symlinks=False)
                except FileNotFoundError:
                    found = None
                if found is None or not S_ISREG(found.st_mode) or found.st_size != offset:
                    raise PathEscapeError(f"chunk at {offset} does not continue the transfer of {relative}")
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            with os.fdopen(os.open(staging, flags, 0o666, dir_fd=directory), "ab") as file:
                file.write(data)

    def commit(self, relative: str, transfer: str) -> MtimeSize:
        parent, staging = self._staging(relative, transfer)
        name = relative.rsplit("/", 1)[-1]
        with no_follow.opened_dir(self.anchor, parent) as directory:
            os.replace(staging, name, src_dir_fd=directory, dst_dir_fd=directory)
            return mtime_size(os.stat(name, dir_fd=directory, follow_symlinks=False))

    def delete_if_unchanged(self, relative: str, expected: MtimeSize) -> bool:
        """Delete the file unless it changed since ``expected`` was recorded (a local edit wins)."""
        return no_follow.unlink(
            self.anchor, self._below(relative), unless=lambda found: mtime_size(found) != tuple(expected)
        )

    def load_manifest(self) -> bytes | None:
        try:
            return no_follow.read(self.anchor, self._manifest)
        except PathEscapeError:
            logger.warning("ignoring the sync manifest: it is a symbolic link")
            return None

    def save_manifest(self, data: bytes) -> None:
        no_follow.write_atomically(self.anchor, self._manifest, data, staging_suffix=STAGING_SUFFIX)

    def _staging(self, relative: str, transfer: str) -> tuple[str, str]:
        """The folder (below the anchor) and name of a transfer's staging file."""
        if not _TRANSFER_ID.match(transfer):
            raise PathEscapeError(f"bad transfer id {transfer!r}")
        parent, _, name = self._below(relative).rpartition("/")
        return parent, f".{name}.{transfer}{STAGING_SUFFIX}"
