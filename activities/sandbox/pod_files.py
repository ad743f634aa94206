"""A sandbox pod's ``/mnt/user-data`` as a sync :class:`~activities.thread_file_sync.WorkingCopy`.

The pod holds no storage credentials: the worker syncs it. Before each sandbox tool call ``ThreadFiles.pull``
brings the pod up to date with the thread's files in storage, after it (also when it failed or timed out)
``ThreadFiles.push`` brings back what the call changed and deleted — the algorithm the worker's own working
copy uses, through the sandbox server's ``/v1/files`` operations (``activities/sandbox/remote.py``) with the
pod's token. The server serves the same ``UserDataTree`` the local working copy is, so confinement, symlinks
and exclusions behave identically; the sync manifest lives in the pod, so whichever worker adopts the pod
(a retried activity, a restarted worker) continues where the last one left off.

Files move in chunks of ``SYNC_CHUNK_BYTES``: any file size syncs, and no request exceeds the server's limits.
"""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import urlencode

from activities.sandbox.remote import FILES_PATH_PREFIX, SYNC_CHUNK_BYTES, RemoteSandbox
from activities.user_data_tree import MtimeSize, PathEscapeError

_TIMEOUT = 120.0


class PodWorkingCopy:
    """The user-data of the sandbox server behind ``sandbox``."""

    def __init__(self, sandbox: RemoteSandbox, *, chunk_bytes: int = SYNC_CHUNK_BYTES) -> None:
        self._sandbox = sandbox
        self._chunk_bytes = chunk_bytes

    def files(self, exclude: frozenset[str]) -> dict[str, MtimeSize]:
        listing = self._json("list", {"exclude": sorted(exclude)})
        return {str(relative): (int(seen[0]), int(seen[1])) for relative, seen in listing.items()}

    def read(self, relative: str) -> bytes | None:
        chunks: list[bytes] = []
        offset = 0
        while True:
            status, chunk = self._raw("read", {"path": relative, "offset": offset, "length": self._chunk_bytes})
            if status == 404:
                return None
            chunks.append(chunk)
            offset += len(chunk)
            if len(chunk) < self._chunk_bytes:
                return b"".join(chunks)

    def write(self, relative: str, data: bytes) -> MtimeSize:
        transfer = uuid.uuid4().hex
        offset = 0
        while True:
            chunk = data[offset : offset + self._chunk_bytes]
            last = offset + len(chunk) >= len(data)
            query = {"path": relative, "transfer": transfer, "offset": offset, **({"last": 1} if last else {})}
            result = self._result(*self._exchange(f"write?{urlencode(query)}", chunk, "application/octet-stream"))
            if last:
                return int(result[0]), int(result[1])
            offset += len(chunk)

    def delete_if_unchanged(self, relative: str, expected: MtimeSize) -> bool:
        return bool(self._json("delete", {"path": relative, "expected": list(expected)}))

    def load_manifest(self) -> bytes | None:
        status, data = self._raw("manifest", {})
        return None if status == 404 else data

    def save_manifest(self, data: bytes) -> None:
        self._result(*self._exchange("manifest-save", data, "application/octet-stream"))

    # -- the protocol -----------------------------------------------------------------------------------------

    def _json(self, operation: str, arguments: dict[str, Any]) -> Any:
        return self._result(*self._exchange(operation, json.dumps(arguments).encode(), "application/json"))

    def _raw(self, operation: str, arguments: dict[str, Any]) -> tuple[int, bytes]:
        """The bytes of a read (200) or a 404; any other answer raises."""
        status, body = self._exchange(operation, json.dumps(arguments).encode(), "application/json")
        if status in (200, 404):
            return status, body
        self._result(status, body)
        raise AssertionError("unreachable: _result raises for every status but 200")

    def _exchange(self, operation: str, data: bytes, content_type: str) -> tuple[int, bytes]:
        path = FILES_PATH_PREFIX + operation
        return self._sandbox.exchange("POST", path, data, content_type=content_type, timeout=_TIMEOUT)

    def _result(self, status: int, body: bytes) -> Any:
        try:
            payload = json.loads(body) if body else {}
        except ValueError:
            payload = {}
        if status == 200 and isinstance(payload, dict):
            return payload.get("result")
        message = str(payload.get("error") if isinstance(payload, dict) else "") or f"HTTP {status}"
        if status == 422:
            raise PathEscapeError(message)
        if status == 401:
            raise self._sandbox.rejected_token()
        raise RuntimeError(f"sandbox server at {self._sandbox.base_url} refused a file sync: HTTP {status}: {message}")
