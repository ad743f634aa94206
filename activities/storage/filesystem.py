"""The ``filesystem`` backend: keys are files under a root directory (the hartflow home by default)."""

from __future__ import annotations

import builtins
import os
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from activities.storage import ObjectExistsError, ObjectInfo, ObjectStore, StorageConfigError, validate_key

_PROBE_KEY = ".hartflow-storage-probe"


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
            return self.path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            if if_absent:
                # link() refuses an existing target atomically: the create-only write the thread store needs.
                try:
                    os.link(tmp, target)
                except FileExistsError:
                    raise ObjectExistsError(key) from None
            else:
                os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def head(self, key: str) -> ObjectInfo | None:
        try:
            stat = self.path(key).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not os.path.isfile(self.path(key)):
            return None
        return _info(key, stat)

    def delete(self, key: str) -> None:
        path = self.path(key)
        try:
            path.unlink()
        except (FileNotFoundError, NotADirectoryError):
            return
        # Prune the directories the key created, so deleting a thread leaves no empty folders behind.
        parent = path.parent
        while parent != self.root and parent.is_relative_to(self.root):
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        # Walk only the deepest directory the prefix names, then filter by the full prefix.
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self.root / base if base else self.root
        if not start.is_dir():
            return
        found: list[ObjectInfo] = []
        for dirpath, dirnames, filenames in os.walk(start):
            dirnames.sort()
            for name in filenames:
                full = Path(dirpath) / name
                key = full.relative_to(self.root).as_posix()
                if key.startswith(prefix) and not _is_temporary(name):
                    try:
                        found.append(_info(key, full.stat()))
                    except FileNotFoundError:
                        continue
        yield from sorted(found, key=lambda info: info.key)

    def list_children(self, prefix: str) -> builtins.list[str]:
        directory = self.path(prefix.rstrip("/")) if prefix.strip("/") else self.root
        try:
            names = os.listdir(directory)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(name for name in names if not _is_temporary(name))


def _is_temporary(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp")


def _info(key: str, stat: os.stat_result) -> ObjectInfo:
    return ObjectInfo(
        key=key,
        size=stat.st_size,
        modified=datetime.fromtimestamp(stat.st_mtime, UTC),
        etag=f"{stat.st_mtime_ns}-{stat.st_size}",
    )
