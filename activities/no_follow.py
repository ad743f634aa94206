"""Files below a trusted folder, reached one component at a time without following a symbolic link.

A run can leave links anywhere in its thread's folders (host bash, an MCP tool, a sandbox pod's shell):
``outputs -> /``, ``uploads -> ../../../bob/threads/t/user-data/uploads``, ``user-data`` or the thread folder
itself replaced by a link. A check that resolves the path first (``realpath``, then a prefix test) trusts
whatever the top-level folder points at, and races a link swapped in between the check and the ``open``. Here
nothing below ``base`` is ever followed: every directory is opened with ``O_NOFOLLOW`` relative to its parent's
descriptor (``openat``), and the file at the end too, so a link at any depth is refused (``PathEscapeError``)
instead of leading out, and a swap after the walk changes nothing already opened.

``base`` itself is opened as given: it is the deployment's own folder (the hartflow home, a pod's
``/mnt/user-data``), which may sit behind a link the operator made.

Used by every reader and writer of thread files on a host: the thread tree (``activities/user_data_tree.py``),
the filesystem object store (``activities/storage/filesystem.py``), the thread folders a local sandbox gets
(``activities/paths.py``) and a thread's deletion (``activities/thread_lifecycle.py``). Stdlib only: the sandbox
image runs it (``k8s/Dockerfile``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW
_PRUNED_AGAIN = 10
"""How often a write makes a folder again that a concurrent delete removed as empty on the write's way, before it
gives up: each time needs that delete (of the folder's last file) to land between two system calls."""


class PathEscapeError(ValueError):
    """A path that would leave its folder: a ``..``/empty segment, or a symbolic link on the way."""


def split(relative: str) -> list[str]:
    """The components of a ``/``-separated path below ``base`` (``""``: ``base`` itself); refuses ``.``, ``..``,
    empty segments and NUL, which could name something that is not below ``base``."""
    if relative == "":
        return []
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts) or "\0" in relative:
        raise PathEscapeError("Access denied: path traversal detected")
    return parts


def _linked(name: str, parent: int) -> PathEscapeError | None:
    """The refusal for ``name`` in ``parent`` when it is a symbolic link (else ``None``)."""
    try:
        found = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except OSError:
        return None
    if stat.S_ISLNK(found.st_mode):
        return PathEscapeError(f"Access denied: {name!r} is a symbolic link")
    return None


def _open_child_dir(parent: int, name: str, *, create: bool) -> int:
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, dir_fd=parent)
    try:
        return os.open(name, _DIRECTORY, dir_fd=parent)
    except OSError as exc:
        # Linux answers O_DIRECTORY|O_NOFOLLOW on a link with ENOTDIR (ELOOP elsewhere): tell the two apart.
        if exc.errno in (errno.ENOTDIR, errno.ELOOP) and (refusal := _linked(name, parent)) is not None:
            raise refusal from None
        raise


@contextlib.contextmanager
def opened_dir(base: Path, relative: str = "", *, create: bool = False) -> Iterator[int]:
    """A descriptor of the directory ``base/relative``, each component below ``base`` opened without following
    a link (:class:`PathEscapeError`); ``create`` makes the missing ones (mode ``0o777`` less the umask).
    ``FileNotFoundError``/``NotADirectoryError`` when a component is missing or a file."""
    if create:
        Path(base).mkdir(parents=True, exist_ok=True)
    parts = split(relative)
    for attempt in range(_PRUNED_AGAIN if create else 1):
        current = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in parts:
                child = _open_child_dir(current, part, create=create)
                os.close(current)
                current = child
        except FileNotFoundError:
            os.close(current)
            # A folder made (or found empty) on the way was removed by a concurrent delete pruning the folders it
            # left empty (``activities/storage/filesystem.py``) before the next one was made in it: walk again.
            if not create or attempt == _PRUNED_AGAIN - 1:
                raise
            continue
        try:
            yield current
        finally:
            os.close(current)
        return


def _parent_and_name(relative: str) -> tuple[str, str]:
    parts = split(relative)
    if not parts:
        raise PathEscapeError("Access denied: a file path needs a name")
    return "/".join(parts[:-1]), parts[-1]


def lstat(base: Path, relative: str) -> os.stat_result | None:
    """What is at ``relative`` without following it (a link there is reported as a link); ``None`` when
    nothing is; :class:`PathEscapeError` when a folder on the way is a link."""
    parent, name = _parent_and_name(relative)
    try:
        with opened_dir(base, parent) as directory:
            return os.stat(name, dir_fd=directory, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None


def open_file(base: Path, relative: str, flags: int, mode: int = 0o666, *, create_folders: bool = False) -> int:
    """A descriptor of the file ``relative`` opened with ``flags`` and ``O_NOFOLLOW``; :class:`PathEscapeError`
    when it or a folder on the way is a link. ``create_folders`` makes the missing folders on the way."""
    parent, name = _parent_and_name(relative)
    with opened_dir(base, parent, create=create_folders) as directory:
        try:
            return os.open(name, flags | _NOFOLLOW, mode, dir_fd=directory)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise PathEscapeError(f"Access denied: {name!r} is a symbolic link") from None
            raise


def read(base: Path, relative: str, offset: int = 0, length: int | None = None) -> bytes | None:
    """``length`` bytes (all when ``None``) from ``offset`` of the regular file at ``relative``; ``None`` when
    it is missing or a folder; :class:`PathEscapeError` when it or a folder on the way is a link."""
    try:
        # O_NONBLOCK: a fifo the run left there must not hang the reader (it is refused below).
        descriptor = open_file(base, relative, os.O_RDONLY | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            return None  # a folder (opened read-only), a fifo, a device
        file.seek(offset)
        return file.read() if length is None else file.read(length)


def write_atomically(
    base: Path, relative: str, data: bytes, *, staging_suffix: str, mode: int = 0o666, exclusive: bool = False
) -> os.stat_result:
    """Write ``data`` beside the file (``.{name}.{random}{staging_suffix}``) and rename it over ``relative``,
    creating the folders on the way, none of them followed if a link; a reader never sees half a file. A link
    at ``relative`` itself is replaced, never written through. ``exclusive``: ``FileExistsError`` instead of
    replacing an existing file. Returns the new file's ``lstat``."""
    parent, name = _parent_and_name(relative)
    for attempt in range(_PRUNED_AGAIN):
        with opened_dir(base, parent, create=True) as directory:
            staging = f".{name}.{uuid.uuid4().hex}{staging_suffix}"
            try:
                created = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode, dir_fd=directory)
            except FileNotFoundError:
                # The folder was empty, and a delete of its last file removed it after it was opened (a removed
                # folder takes no new names): make it again. Once the staging file is in, it is not empty.
                if attempt == _PRUNED_AGAIN - 1:
                    raise
                continue
            return _publish(directory, staging, name, created, data, exclusive=exclusive)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _publish(directory: int, staging: str, name: str, created: int, data: bytes, *, exclusive: bool) -> os.stat_result:
    """Write ``data`` to the staging file and rename (``exclusive``: link) it to ``name``."""
    with os.fdopen(created, "wb") as file:
        file.write(data)
    try:
        if exclusive:
            os.link(staging, name, src_dir_fd=directory, dst_dir_fd=directory, follow_symlinks=False)
        else:
            os.replace(staging, name, src_dir_fd=directory, dst_dir_fd=directory)
        return os.stat(name, dir_fd=directory, follow_symlinks=False)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging, dir_fd=directory)


def unlink(base: Path, relative: str, *, unless: Callable[[os.stat_result], bool] | None = None) -> bool:
    """Remove the name ``relative`` (a link there is removed, not what it points at); ``False`` when nothing
    was there or ``unless(lstat)`` holds. :class:`PathEscapeError` when a folder on the way is a link."""
    parent, name = _parent_and_name(relative)
    try:
        with opened_dir(base, parent) as directory:
            if unless is not None and unless(os.stat(name, dir_fd=directory, follow_symlinks=False)):
                return False
            os.unlink(name, dir_fd=directory)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return True


def files(base: Path, relative: str, *, skip: Callable[[str], bool]) -> Iterator[tuple[str, os.stat_result]]:
    """``(path relative to base, lstat)`` of every regular file below the folder ``relative``, never through a
    link (``os.fwalk`` opens each folder by descriptor and skips one swapped for a link); names for which
    ``skip`` holds are neither listed nor walked into. Nothing when the folder is missing."""
    try:
        with opened_dir(base, relative) as top:
            for current, dirs, names, directory in os.fwalk(".", dir_fd=top):
                dirs[:] = sorted(name for name in dirs if not skip(name))
                below = current[2:]  # "./a/b" → "a/b"
                for name in sorted(names):
                    if skip(name):
                        continue
                    try:
                        found = os.stat(name, dir_fd=directory, follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # deleted while we walked
                    if stat.S_ISREG(found.st_mode):
                        yield "/".join(part for part in (relative, below, name) if part), found
    except (FileNotFoundError, NotADirectoryError):
        return


def refuse_links(base: Path, relative: str) -> None:
    """:class:`PathEscapeError` when any existing component of ``relative`` (the last one included) is a link;
    stops at the first missing one. For a check before a write that goes somewhere else first."""
    parts = split(relative)
    with contextlib.ExitStack() as stack:
        current = stack.enter_context(opened_dir(base))
        for index, part in enumerate(parts):
            if (refusal := _linked(part, current)) is not None:
                raise refusal
            if index == len(parts) - 1:
                return
            try:
                current = os.open(part, _DIRECTORY, dir_fd=current)
            except (FileNotFoundError, NotADirectoryError):
                return
            stack.callback(os.close, current)
