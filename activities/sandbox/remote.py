"""The sandbox server's HTTP protocol, and :class:`RemoteSandbox`: that server seen as a :class:`Sandbox`.

The server (``workers/sandbox_server.py``, the entrypoint of hartflow's sandbox image) exposes the
:class:`Sandbox` methods one-to-one, so the tools in ``activities/sandbox_tools.py`` behave the same whichever backend
runs them::

    GET  /healthz                  no auth; the pod's readiness and liveness probe
    POST /v1/sandbox/{method}      Authorization: Bearer <token>; body: the method's keyword arguments as JSON
         200 {"result": ...}       the method's return value (GrepMatch as an object)
         422 {"error": "..."}      a SandboxError: the model caused it and reads the message
         413 {"error": "..."}      a request the server refuses to take (over-long command, huge body)
         401 / 400 / 404           wrong token / malformed request / unknown method: bugs, never the model's doing
    POST /v1/files/{operation}     Authorization: Bearer <token>; the worker's file sync of the pod's
                                   /mnt/user-data (activities/sandbox/pod_files.py), never a model's tool:
         list      {"exclude": [names]}          → {"result": {relative: [mtime_ns, size]}}
         read      {"path", "offset", "length"}  → the bytes (404: no such file)
         write     ?path=&transfer=&offset=&last=1, the chunk as body → {"result": [mtime_ns, size] | null}
         delete    {"path", "expected": [mtime_ns, size]} → {"result": deleted?}
         manifest  {} → the sync manifest's bytes (404: none yet); manifest-save: the bytes as body
         422 {"error": "..."}      a path outside the three folders (or through a symlink), a broken transfer

Paths of ``/v1/files`` are user-data-relative (``outputs/report.md``). Files move in chunks of at most
``SYNC_CHUNK_BYTES``, so no file is too big to sync and no request exceeds the server's body limit.

Stdlib only: the sandbox image installs no third-party packages, and a plain connection per call costs
nothing next to the command it carries.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from activities.sandbox.base import GrepMatch, Sandbox, SandboxError

HEALTH_PATH = "/healthz"
METHOD_PATH_PREFIX = "/v1/sandbox/"
FILES_PATH_PREFIX = "/v1/files/"
FILE_OPERATIONS = ("list", "read", "write", "delete", "manifest", "manifest-save")
SYNC_CHUNK_BYTES = 8 * 1024 * 1024
METHODS = ("execute_command", "read_file", "write_file", "list_dir", "glob", "grep", "str_replace")
TOKEN_ENV = "HARTFLOW_SANDBOX_TOKEN"
"""The per-sandbox bearer token; in a pod it comes from the Secret the provider creates."""

MAX_COMMAND_CHARS = 10_000
"""DeerFlow's SandboxAudit limit; the server enforces it again because it is the boundary."""

_FILE_CALL_TIMEOUT = 120.0
_EXEC_TIMEOUT_MARGIN = 30.0
"""The server kills a command at its timeout; the reply may take a little longer to arrive."""


class SandboxUnavailableError(RuntimeError):
    """The sandbox server did not answer (pod gone, restarting, or a stale address): an infrastructure
    failure the activity retries, never something for the model to read."""


class RemoteSandbox(Sandbox):
    """A sandbox server at ``base_url`` (``http://host:port``), authenticated by ``token``.

    ``on_unavailable`` runs when the server cannot be reached or rejects the token, so the provider can
    forget this address and look the sandbox up again on the next attempt.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        default_timeout: float,
        on_unavailable: Callable[[], None] | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"sandbox url must be http://host:port, got {base_url!r}")
        self.base_url = base_url
        self._host, self._port = parts.hostname, parts.port or 80
        self._token = token
        self._default_timeout = default_timeout
        self._on_unavailable = on_unavailable

    def execute_command(self, command: str, timeout: float | None = None) -> str:
        budget = self._default_timeout if timeout is None else timeout
        return str(self._call("execute_command", {"command": command, "timeout": timeout}, budget))

    def read_file(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        return str(self._call("read_file", {"path": path, "start_line": start_line, "end_line": end_line}))

    def write_file(self, path: str, content: str, append: bool = False) -> None:
        self._call("write_file", {"path": path, "content": content, "append": append})

    def list_dir(self, path: str, max_depth: int = 2) -> list[str]:
        return [str(entry) for entry in self._call("list_dir", {"path": path, "max_depth": max_depth})]

    def glob(self, path: str, pattern: str, include_dirs: bool = False, max_results: int = 200) -> list[str]:
        arguments = {"path": path, "pattern": pattern, "include_dirs": include_dirs, "max_results": max_results}
        return [str(entry) for entry in self._call("glob", arguments)]

    def grep(
        self,
        path: str,
        pattern: str,
        glob: str | None = None,
        literal: bool = False,
        case_sensitive: bool = False,
        max_results: int = 100,
    ) -> list[GrepMatch]:
        arguments = {
            "path": path,
            "pattern": pattern,
            "glob": glob,
            "literal": literal,
            "case_sensitive": case_sensitive,
            "max_results": max_results,
        }
        return [GrepMatch(**match) for match in self._call("grep", arguments)]

    def str_replace(self, path: str, old_str: str, new_str: str, replace_all: bool = False) -> str:
        # On the server, so the read-modify-write is atomic against parallel tool calls.
        arguments = {"path": path, "old_str": old_str, "new_str": new_str, "replace_all": replace_all}
        return str(self._call("str_replace", arguments))

    def healthy(self) -> bool:
        try:
            status, _ = self._request("GET", HEALTH_PATH, None, timeout=5.0)
        except SandboxUnavailableError:
            return False
        return status == 200

    def _call(self, method: str, arguments: dict[str, Any], budget: float | None = None) -> Any:
        timeout = _FILE_CALL_TIMEOUT if budget is None else budget + _EXEC_TIMEOUT_MARGIN
        status, payload = self._request("POST", METHOD_PATH_PREFIX + method, arguments, timeout=timeout)
        if status == 200:
            return payload.get("result")
        message = str(payload.get("error") or f"HTTP {status}")
        if status in (413, 422):
            raise SandboxError(message)
        if status == 401:
            raise self.rejected_token()
        raise RuntimeError(f"sandbox server at {self.base_url} answered {method} with HTTP {status}: {message}")

    def _request(self, verb: str, path: str, body: Any, *, timeout: float) -> tuple[int, dict[str, Any]]:
        data = None if body is None else json.dumps(body).encode("utf-8")
        status, raw = self.exchange(verb, path, data, timeout=timeout)
        return status, _json_payload(raw)

    def exchange(
        self, verb: str, path: str, data: bytes | None, *, content_type: str = "application/json", timeout: float
    ) -> tuple[int, bytes]:
        """One request with the pod's token: the status and the raw body. :class:`SandboxUnavailableError`
        when the server cannot be reached."""
        connection = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        headers = {"Authorization": f"Bearer {self._token}"}
        if data is not None:
            headers["Content-Type"] = content_type
        try:
            connection.request(verb, path, body=data, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as exc:  # refused, reset, timed out, cut short
            self._unavailable()
            raise SandboxUnavailableError(f"sandbox server at {self.base_url} is unreachable: {exc}") from None
        finally:
            connection.close()
        return response.status, raw

    def rejected_token(self) -> SandboxUnavailableError:
        """The error for a 401: the address is stale (another pod took it) and is forgotten."""
        self._unavailable()
        return SandboxUnavailableError(f"sandbox server at {self.base_url} rejected the token")

    def _unavailable(self) -> None:
        if self._on_unavailable is not None:
            self._on_unavailable()


def _json_payload(raw: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(raw) if raw else {}
    except ValueError:
        payload = {"error": raw[:200].decode("utf-8", errors="replace")}
    return payload if isinstance(payload, dict) else {"result": payload}
