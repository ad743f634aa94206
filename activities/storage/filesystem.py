"""The ``filesystem`` backend: keys are files under a root directory (the hartflow home by default).

The root is the operator's; everything below it may have been made by a run (a thread's ``user-data`` is the
local sandbox's folder), so no key is read, written, listed or deleted through a symlink: each folder of a key
is opened without following one (``activities/no_follow.py``). A link is no object (``get``/``head`` say
``None``, ``list`` leaves it out) and a ``put`` whose folder is a link raises
:class:`~activities.no_follow.PathEscapeError` with nothing written.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from stat import S_ISREG

from activities import no_follow
from activities.no_follow import PathEscapeError
from activities.storage import ObjectExistsError, ObjectInfo, ObjectStore, StorageConfigError, validate_key

_PROBE_KEY = ".hartflow-storage-probe"
_TEMPORARY_SUFFIX = ".tmp"


class FilesystemObjectStore(ObjectStore):
    backend = "filesystem"

    def __init__(self, root: Path):
        self.root = Path(root)

    def describe(self) -> str:
        return str(self.root)

    def path(self, key: str) -> Path:
        return self.root / validate_key(key)

    def check(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self.put(_PROBE_KEY, b"ok")
            self.delete(_PROBE_KEY)
        except OSError as exc:
            raise StorageConfigError(f"storage.home {self.root} is not writable: {exc.strerror}") from None

    def get(self, key: str) -> bytes | None:
        try:
            return no_follow.read(self.root, validate_key(key))
        except PathEscapeError:
            return None  # a link (or a folder on the way that is one) holds no object

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        """Write aside and rename; with ``if_absent`` a ``link()``, which refuses an existing target atomically
        (the create-only write the thread store needs). :class:`PathEscapeError` when a folder on the way is a
        symlink: nothing is written through it. A folder on the way that a concurrent delete removed as it emptied
        is made again (``activities/no_follow.py``, ``write_atomically``)."""
        try:
            no_follow.write_atomically(
                self.root, validate_key(key), data, staging_suffix=_TEMPORARY_SUFFIX, mode=0o600, exclusive=if_absent
            )
        except FileExistsError:
            raise ObjectExistsError(key) from None

    def head(self, key: str) -> ObjectInfo | None:
        try:
            found = no_follow.lstat(self.root, validate_key(key))
        except PathEscapeError:
            return None
        if found is None or not S_ISREG(found.st_mode):
            return None
        return _info(key, found)

    def delete(self, key: str) -> None:
        """Remove the key's file (a symlink there is removed, never what it points at; a folder on the way that
        is a symlink means there is nothing to delete), then the folders it leaves empty, so deleting a
        thread leaves no empty folders behind."""
        parts = validate_key(key).split("/")
        try:
            if not no_follow.unlink(self.root, key):
                return
        except PathEscapeError:
            return
        for depth in range(len(parts) - 1, 0, -1):
            try:
                with no_follow.opened_dir(self.root, "/".join(parts[: depth - 1])) as parent:
                    os.rmdir(parts[depth - 1], dir_fd=parent)
            except (OSError, PathEscapeError):
                break

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Walk only the deepest folder the prefix names, then filter by the full prefix; regular files only,
        never through a symlink (``activities/no_follow.py``)."""
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        try:
            found = [
                _info(key, stat)
                for key, stat in no_follow.files(self.root, base, skip=_is_temporary)
                if key.startswith(prefix)
            ]
        except PathEscapeError:
            return
        yield from sorted(found, key=lambda info: info.key)

    def list_children(self, prefix: str) -> builtins.list[str]:
        try:
            with no_follow.opened_dir(self.root, prefix.rstrip("/")) as directory:
                names = os.listdir(directory)
        except (FileNotFoundError, NotADirectoryError, PathEscapeError):
            return []
        return sorted(name for name in names if not _is_temporary(name))


def _is_temporary(name: str) -> bool:
    return name.startswith(".") and name.endswith(_TEMPORARY_SUFFIX)


def _info(key: str, stat: os.stat_result) -> ObjectInfo:
    return ObjectInfo(
        key=key,
        size=stat.st_size,
        modified=datetime.fromtimestamp(stat.st_mtime, UTC),
        etag=f"{stat.st_mtime_ns}-{stat.st_size}",
    )
