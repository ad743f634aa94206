"""hartflow's sandbox server: the entrypoint of the sandbox image, one process per Kubernetes sandbox pod.

It serves the :class:`~activities.sandbox.base.Sandbox` methods over HTTP (the protocol is in
``activities/sandbox/remote.py``) on top of a :class:`~activities.sandbox.local_sandbox.LocalSandbox` rooted at the
pod's ``/mnt/user-data``, so path confinement, the bash report, timeouts and output capture are the very code
the local provider runs:

* file methods only reach ``/mnt/user-data/{workspace,uploads,outputs}``;
* ``execute_command`` runs bash in the workspace, killed after ``--bash-timeout`` seconds (the default and
  the ceiling of a caller's timeout), keeping at most ``--max-output-bytes`` of each stream; commands longer
  than 10,000 characters are refused;
* ``/v1/files`` lets the worker sync the three folders with the thread's storage (the pod holds no storage
  credentials): listings, chunked reads and writes, deletions and the sync manifest, through the same
  :class:`~activities.user_data_tree.UserDataTree` the worker's own working copy uses — same confinement, no
  symlink followed anywhere below the root (also not ``outputs -> /``: ``activities/no_follow.py``), no chunk
  over ``SYNC_CHUNK_BYTES``;
* every ``/v1`` call needs the pod's bearer token (``$HARTFLOW_SANDBOX_TOKEN``, from the Secret the provider
  creates; removed from the environment commands inherit); ``/healthz`` needs none.

Stdlib only, so the image carries no third-party packages::

    python -m workers.sandbox_server [--host 0.0.0.0] [--port 8080] [--root /mnt/user-data]
"""

from __future__ import annotations

import argparse
import hmac
import inspect
import json
import os
import signal
import sys
import threading
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from activities.paths import USER_DATA_DIRS, VIRTUAL_PATH_PREFIX
from activities.sandbox.base import GrepMatch, SandboxError
from activities.sandbox.local_sandbox import LocalSandbox
from activities.sandbox.remote import (
    FILE_OPERATIONS,
    FILES_PATH_PREFIX,
    HEALTH_PATH,
    MAX_COMMAND_CHARS,
    METHOD_PATH_PREFIX,
    METHODS,
    SYNC_CHUNK_BYTES,
    TOKEN_ENV,
)
from activities.user_data_tree import PathEscapeError, UserDataTree

DEFAULT_PORT = 8080
DEFAULT_BASH_TIMEOUT = 600.0
DEFAULT_MAX_OUTPUT_BYTES = 10 * 1024 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
"""Appends are exempt from write_file's 80 KiB cap; this only stops a request from exhausting memory."""
SYNC_MANIFEST = ".hartflow-sync.json"
"""The pod's sync manifest, beside the three folders: any worker that adopts the pod continues its sync."""


@dataclass(frozen=True)
class MountedUserData:
    """The pod's own ``/mnt/user-data`` (in tests, a directory standing in for it)."""

    user_data: Path

    @property
    def anchor(self) -> Path:
        """The pod's mount is the deployment's: only what is below it may be a link a command made."""
        return self.user_data

    @property
    def workspace(self) -> Path:
        return self.user_data / "workspace"


class SandboxServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        *,
        root: Path,
        token: str,
        bash_timeout: float = DEFAULT_BASH_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> None:
        for name in USER_DATA_DIRS:
            (root / name).mkdir(parents=True, exist_ok=True)
        self.sandbox = LocalSandbox(
            MountedUserData(root),
            allow_host_bash=True,  # the pod is the isolation boundary
            bash_timeout=bash_timeout,
            file_lock=threading.RLock(),
            capture_limit_bytes=max_output_bytes,
        )
        self.tree = UserDataTree(root, root / SYNC_MANIFEST)
        self.bash_timeout = bash_timeout
        self.expected_authorization = f"Bearer {token}".encode()
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: SandboxServer
    server_version = "hartflow-sandbox"

    def do_GET(self) -> None:
        if self.path == HEALTH_PATH:
            self._reply(200, {"status": "ok", "root": VIRTUAL_PATH_PREFIX})
        else:
            self._reply(404, {"error": f"no such endpoint: GET {self.path}"})

    def do_POST(self) -> None:
        if not self.path.startswith((METHOD_PATH_PREFIX, FILES_PATH_PREFIX)):
            return self._reply(404, {"error": f"no such endpoint: POST {self.path}"})
        given = self.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, self.server.expected_authorization):
            return self._reply(401, {"error": "missing or wrong bearer token"})
        if self.path.startswith(FILES_PATH_PREFIX):
            return self._file_operation()
        method = self.path[len(METHOD_PATH_PREFIX) :]
        if method not in METHODS:
            return self._reply(404, {"error": f"unknown sandbox method: {method}"})
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            return self._reply(413, {"error": f"request of {length} bytes exceeds the {MAX_BODY_BYTES}-byte limit"})
        try:
            arguments = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(arguments, dict):
                raise ValueError("the body must be a JSON object of keyword arguments")
            target = getattr(self.server.sandbox, method)
            inspect.signature(target).bind(**arguments)
        except (ValueError, TypeError) as exc:
            return self._reply(400, {"error": f"bad arguments for {method}: {exc}"})
        if method == "execute_command":
            refusal = self._limit_command(arguments)
            if refusal is not None:
                return self._reply(*refusal)
        try:
            result = target(**arguments)
        except SandboxError as exc:
            return self._reply(422, {"error": str(exc)})
        if method == "grep":
            result = [asdict(match) for match in result if isinstance(match, GrepMatch)]
        self._reply(200, {"result": result})

    def _file_operation(self) -> None:
        url = urlsplit(self.path)
        operation = url.path[len(FILES_PATH_PREFIX) :]
        if operation not in FILE_OPERATIONS:
            return self._reply(404, {"error": f"unknown file operation: {operation}"})
        length = int(self.headers.get("Content-Length") or 0)
        if length > SYNC_CHUNK_BYTES + 4096:
            return self._reply(413, {"error": f"request of {length} bytes exceeds the {SYNC_CHUNK_BYTES}-byte chunk"})
        body = self.rfile.read(length)
        tree = self.server.tree
        query = {name: values[0] for name, values in parse_qs(url.query).items()}
        try:
            if operation == "write":
                offset, last = int(query["offset"]), query.get("last") == "1"
                tree.stage(query["path"], query["transfer"], offset, body)
                result = list(tree.commit(query["path"], query["transfer"])) if last else None
                return self._reply(200, {"result": result})
            if operation == "manifest-save":
                tree.save_manifest(body)
                return self._reply(200, {"result": None})
            arguments = json.loads(body or b"{}")
            if operation == "list":
                files = tree.files(frozenset(str(name) for name in arguments.get("exclude", [])))
                return self._reply(200, {"result": {relative: list(seen) for relative, seen in files.items()}})
            if operation == "delete":
                mtime_ns, size = (int(value) for value in arguments["expected"])
                return self._reply(200, {"result": tree.delete_if_unchanged(arguments["path"], (mtime_ns, size))})
            if operation == "manifest":
                data = tree.load_manifest()
            else:
                chunk = min(int(arguments.get("length", SYNC_CHUNK_BYTES)), SYNC_CHUNK_BYTES)
                data = tree.read(arguments["path"], max(int(arguments.get("offset", 0)), 0), max(chunk, 0))
        except PathEscapeError as exc:
            return self._reply(422, {"error": str(exc)})
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            return self._reply(400, {"error": f"bad arguments for {operation}: {exc!r}"})
        if data is None:
            return self._reply(404, {"error": "no such file"})
        self._send(200, "application/octet-stream", data)

    def _limit_command(self, arguments: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        command = arguments.get("command")
        if not isinstance(command, str):
            return 400, {"error": "command must be a string"}
        if len(command) > MAX_COMMAND_CHARS:
            return 413, {"error": f"command too long: {len(command)} characters, the limit is {MAX_COMMAND_CHARS}"}
        timeout = arguments.get("timeout")
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            return 400, {"error": "timeout must be a positive number of seconds"}
        # The server's timeout is the ceiling: a caller cannot keep the pod busy longer than configured.
        arguments["timeout"] = self.server.bash_timeout if timeout is None else min(timeout, self.server.bash_timeout)
        return None

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        self._send(status, "application/json; charset=utf-8", json.dumps(payload, ensure_ascii=False).encode())

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        # Method and status only: bodies carry commands and file contents.
        sys.stderr.write(f"{self.address_string()} {format % args}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sandbox_server", description="hartflow's sandbox server")
    parser.add_argument("--host", default="0.0.0.0", help="all interfaces of the pod's own network namespace")
    parser.add_argument("--port", type=int, default=int(os.environ.get("HARTFLOW_SANDBOX_PORT", DEFAULT_PORT)))
    parser.add_argument("--root", type=Path, default=Path(VIRTUAL_PATH_PREFIX), help="the directory to serve")
    parser.add_argument(
        "--bash-timeout",
        type=float,
        default=float(os.environ.get("HARTFLOW_SANDBOX_BASH_TIMEOUT", DEFAULT_BASH_TIMEOUT)),
    )
    parser.add_argument(
        "--max-output-bytes",
        type=int,
        default=int(os.environ.get("HARTFLOW_SANDBOX_MAX_OUTPUT_BYTES", DEFAULT_MAX_OUTPUT_BYTES)),
    )
    args = parser.parse_args(argv)
    token = os.environ.pop(TOKEN_ENV, "")
    if not token:
        print(f"sandbox_server: ${TOKEN_ENV} is not set; refusing to serve without authentication", file=sys.stderr)
        return 2
    server = SandboxServer(
        (args.host, args.port),
        root=args.root,
        token=token,
        bash_timeout=args.bash_timeout,
        max_output_bytes=args.max_output_bytes,
    )
    # shutdown() waits for serve_forever() to return, so it must not run on serve_forever's own thread.
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"sandbox server listening on http://{args.host}:{server.server_address[1]}", flush=True)
    with server:
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
