"""Real HTTP for the Agent Server tests: ``hartflow serve`` as its own process, and a TCP proxy that can cut
the connections through it (the transport drop a load balancer or a flaky network gives a streaming client)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from workers.config import HartflowConfig
from workers.devserver import free_port

_READY_TIMEOUT = 120.0


def write_config(config: HartflowConfig, directory: Path, name: str = "hartflow.yaml") -> Path:
    path = directory / name
    path.write_text(config.model_dump_json(), encoding="utf-8")  # JSON is YAML
    return path


class ApiServer:
    """``hartflow serve --config FILE --port P`` in a subprocess; ``url`` once it announced itself."""

    def __init__(self, config_file: Path, *, port: int | None = None) -> None:
        self.config_file = config_file
        self._port = port
        self.stderr: list[str] = []
        self._process: subprocess.Popen[str] | None = None

    @property
    def port(self) -> int:
        """The given port, else a free one picked when first asked for: at the latest by :meth:`start`, not when
        the server is made. A port picked long before anything binds it is free for any process to take meanwhile
        (the kernel hands the same range out as the local port of outgoing connections), and a server started later
        on it could not listen (a second server, started after the first one was killed, did that)."""
        if self._port is None:
            self._port = free_port()
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ApiServer:
        env = {k: v for k, v in os.environ.items() if k != "TEMPORAL_ADDRESS" and not k.startswith("HARTFLOW_")}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "workers.cli", "serve", "--config", str(self.config_file), "--port", str(self.port)],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=Path(__file__).resolve().parents[2],
        )
        # Each process its own event: the reader of a killed one reaches its end of stderr whenever it does, and
        # must not tell a restarted server's start() that the new one is up (it did: a client then found no one).
        ready = threading.Event()
        threading.Thread(target=self._read, args=(self._process, ready), daemon=True).start()
        if not ready.wait(_READY_TIMEOUT) or self._process.poll() is not None:
            self.stop()
            raise RuntimeError("hartflow serve did not start:\n" + "".join(self.stderr[-30:]))
        return self

    def _read(self, process: subprocess.Popen[str], ready: threading.Event) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            self.stderr.append(line)
            if line.startswith(f"API: {self.url}"):
                ready.set()
        ready.set()  # it exited: start() sees that

    def kill(self) -> None:
        """SIGKILL: nothing gets to clean up, as when a machine dies."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def stop(self) -> int | None:
        """SIGTERM, as a service manager stops it; returns its exit code."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        return None if self._process is None else self._process.returncode


class CuttingProxy:
    """A loopback TCP proxy to ``target_port``; :meth:`cut` drops every connection open at that moment."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> CuttingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def cut(self) -> None:
        for writer in list(self._open):
            with contextlib.suppress(Exception):
                writer.transport.abort()
        self._open.clear()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._open.update({client_writer, upstream_writer})
        await asyncio.gather(
            self._pipe(client_reader, upstream_writer),
            self._pipe(upstream_reader, client_writer),
            return_exceptions=True,
        )
        for writer in (client_writer, upstream_writer):
            self._open.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.transport.abort()  # one side is gone: so is the other (a half-open HTTP connection is useless)
