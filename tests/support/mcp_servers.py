"""Our MCP test server (``tests/support/mcp_test_server.py``) for the tests, over stdio or over streamable HTTP (or
SSE) kept running by a small supervisor, and a git repository for the published git server
(``workers.testing.mcp``)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workers.devserver import free_port, port_answers


def our_server_stdio(marker: Path) -> dict[str, Any]:
    return {"command": sys.executable, "args": ["-m", "tests.support.mcp_test_server", "--marker", str(marker)]}


def make_repository(path: Path) -> Path:
    """A git repository with one commit, made with the git CLI."""
    path.mkdir(parents=True)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Ada",
        "GIT_AUTHOR_EMAIL": "ada@example.com",
        "GIT_COMMITTER_NAME": "Ada",
        "GIT_COMMITTER_EMAIL": "ada@example.com",
    }
    (path / "README.md").write_text("hello\n", encoding="utf-8")
    for command in (["init", "-q"], ["add", "README.md"], ["commit", "-q", "-m", "the first commit"]):
        subprocess.run(["git", *command], cwd=path, env=env, check=True)
    return path


class SupervisedHttpServer:
    """Our test server over streamable HTTP (or SSE), started again whenever it exits (as a process manager
    would)."""

    def __init__(self, directory: Path, *, env: dict[str, str], sse: bool = False) -> None:
        self.port = free_port()
        self.sse = sse
        self.marker = directory / "crashed"
        self._env = {**os.environ, **env}
        self._log = (directory / "mcp-http.log").open("ab")
        self._stopping = threading.Event()
        self._process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._thread = threading.Thread(target=self._supervise, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/sse" if self.sse else f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> SupervisedHttpServer:
        self._thread.start()
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not port_answers("127.0.0.1", self.port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the MCP test server did not listen on {self.port}")
            time.sleep(0.05)

    def _supervise(self) -> None:
        command = [
            sys.executable,
            "-m",
            "tests.support.mcp_test_server",
            "--port",
            str(self.port),
            "--marker",
            str(self.marker),
            *(["--sse"] if self.sse else []),
        ]
        while not self._stopping.is_set():
            self._process = subprocess.Popen(command, env=self._env, stdout=self._log, stderr=self._log)
            self.starts += 1
            self._process.wait()

    def stop(self) -> None:
        self._stopping.set()
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)
        self._thread.join(timeout=10)
        self._log.close()


@contextlib.contextmanager
def supervised_http_server(directory: Path, api_key: str, *, sse: bool = False) -> Iterator[SupervisedHttpServer]:
    """A :class:`SupervisedHttpServer` in ``directory`` that authorizes ``api_key`` (its ``EXPECTED_API_KEY``),
    started, and stopped on leaving."""
    server = SupervisedHttpServer(directory, env={"EXPECTED_API_KEY": api_key}, sse=sse).start()
    try:
        yield server
    finally:
        server.stop()
