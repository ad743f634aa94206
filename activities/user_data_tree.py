"""A thread's ``user-data`` folder as a tree of files: the side of a sync that holds the files.

Two places hold a copy of a thread's ``{workspace,uploads,outputs}``: a worker's working copy under its home
(``activities/thread_files.py``, for the local sandbox on S3) and a sandbox pod's ``/mnt/user-data`` (the
sandbox server serves this very class to the worker, ``activities/sandbox/pod_files.py``). Both answer the
same questions to the one sync algorithm in ``ThreadFiles``: which files are there (``(mtime_ns, size)`` per
user-data-relative path), read one, write one atomically, delete one unless it changed, and keep the sync
manifest next to the folders.

Safety, the same in both places: a relative path is used only when it is under one of the three folders
without ``.``/``..``/empty segments; no write or read follows a symlink out of the three folders, and a
listing never contains symlinks (``ln -s /etc/passwd`` in the workspace uploads nothing); names in
``exclude`` (``storage.sync_exclude``) are neither listed nor walked into.

Stdlib only: the sandbox image runs it without third-party packages.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from pathlib import Path

from vocabulary.paths import USER_DATA_DIRS, VIRTUAL_PATH_PREFIX, is_upload_staging_file

logger = logging.getLogger(__name__)

STAGING_SUFFIX = ".sync-tmp"
"""Suffix of half-written files (a download, a direct write or a chunked transfer before its rename)."""
_TRANSFER_ID = re.compile(r"^[0-9a-f]{32}$")

MtimeSize = tuple[int, int]
"""A file's ``(st_mtime_ns, st_size)``: what tells a sync that the file changed since it last saw it."""


class PathEscapeError(ValueError):
    """A virtual path (or a stored key) that would leave the thread's user-data folders."""


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
    """The files under ``root`` (a thread's ``user-data``), with the sync manifest at ``manifest``."""

    def __init__(self, root: Path, manifest: Path) -> None:
        self.root = Path(root)
        self.manifest = Path(manifest)

    def path(self, relative: str) -> Path:
        """The file for a user-data-relative path; refuses one that symlinks (itself or through a parent) out
        of the three folders."""
        target = self.root / checked_relative(relative)
        resolved = Path(os.path.realpath(target))
        if not any(resolved.is_relative_to(os.path.realpath(self.root / name)) for name in USER_DATA_DIRS):
            raise PathEscapeError("Access denied: path traversal detected")
        return target

    def files(self, exclude: frozenset[str] = frozenset()) -> dict[str, MtimeSize]:
        """Regular files as ``{relative: (mtime_ns, size)}``, outside excluded names (whose trees are not even
        walked); never symlinks, nor half-written files (an upload's staging file, a transfer in progress)."""
        found: dict[str, MtimeSize] = {}
        for top in USER_DATA_DIRS:
            for current, dirs, names in os.walk(self.root / top):  # os.walk does not descend into symlinked dirs
                dirs[:] = [name for name in dirs if name not in exclude]
                for name in names:
                    if name in exclude or is_upload_staging_file(name) or name.endswith(STAGING_SUFFIX):
                        continue
                    path = Path(current) / name
                    try:
                        stat = path.lstat()
                    except FileNotFoundError:
                        continue  # deleted while we walked
                    if not path.is_file() or path.is_symlink():
                        continue
                    relative = path.relative_to(self.root).as_posix()
                    try:
                        found[checked_relative(relative)] = mtime_size(stat)
                    except PathEscapeError:
                        logger.warning("not syncing %s: the name cannot be a storage key", relative)
        return found

    def read(self, relative: str, offset: int = 0, length: int | None = None) -> bytes | None:
        """``length`` bytes (all when ``None``) from ``offset``; ``None`` when the file is gone. Never follows a
        symlink, also one swapped in after the listing."""
        path = self.path(relative)
        try:
            descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        except OSError as exc:  # ELOOP: a symlink
            raise PathEscapeError(f"not a regular file: {relative}") from exc
        with os.fdopen(descriptor, "rb") as file:
            file.seek(offset)
            return file.read() if length is None else file.read(length)

    def write(self, relative: str, data: bytes) -> MtimeSize:
        """Store ``data`` atomically (a reader or a sandbox command never sees half a file)."""
        target = self.path(relative)
        write_atomically(target, data)
        return mtime_size(target.stat())

    def stage(self, relative: str, transfer: str, offset: int, data: bytes) -> None:
        """Write one chunk of a file transferred in several; it becomes the file at :meth:`commit`."""
        staging = self._staging(relative, transfer)
        if offset == 0:
            staging.parent.mkdir(parents=True, exist_ok=True)
            staging.unlink(missing_ok=True)
        elif not staging.is_file() or staging.stat().st_size != offset:
            raise PathEscapeError(f"chunk at {offset} does not continue the transfer of {relative}")
        with staging.open("ab") as file:
            file.write(data)

    def commit(self, relative: str, transfer: str) -> MtimeSize:
        staging, target = self._staging(relative, transfer), self.path(relative)
        os.replace(staging, target)
        return mtime_size(target.stat())

    def delete_if_unchanged(self, relative: str, expected: MtimeSize) -> bool:
        """Delete the file unless it changed since ``expected`` was recorded (a local edit wins)."""
        path = self.path(relative)
        try:
            if mtime_size(path.lstat()) != tuple(expected):
                return False
            path.unlink()
        except FileNotFoundError:
            return False
        return True

    def load_manifest(self) -> bytes | None:
        try:
            return self.manifest.read_bytes()
        except FileNotFoundError:
            return None

    def save_manifest(self, data: bytes) -> None:
        write_atomically(self.manifest, data)

    def _staging(self, relative: str, transfer: str) -> Path:
        if not _TRANSFER_ID.match(transfer):
            raise PathEscapeError(f"bad transfer id {transfer!r}")
        target = self.path(relative)
        return target.with_name(f".{target.name}.{transfer}{STAGING_SUFFIX}")


def write_atomically(target: Path, data: bytes) -> None:
    """Write aside and rename, so a reader (or a sandbox command) never sees half a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.{uuid.uuid4().hex}{STAGING_SUFFIX}")
    try:
        staging.write_bytes(data)
        os.replace(staging, target)
    finally:
        staging.unlink(missing_ok=True)
