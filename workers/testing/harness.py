"""A hartflow config pointed at a test's Temporal server, an in-process worker for it, and the wait for a run to
settle: what every test of a run needs between starting the server and asserting."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from workers.config import HartflowConfig, load_config
from workers.payloads import client_for
from workers.testing.scripts import unique
from workers.worker import build_worker
from workers.worker_stop import running
from workflows.run import RunView


def make_config(home: Path, address: str, **overrides: Any) -> HartflowConfig:
    """hartflow's default config on ``address`` with ``home`` as its storage, a task queue of its own (so tests
    sharing a server never take each other's tasks), host bash allowed and short heartbeats (a killed worker's
    activities move on in seconds). ``run``, ``sandbox`` and ``storage`` overrides merge into those sections; no
    environment variable is read."""
    run = overrides.pop("run", {})
    sandbox = overrides.pop("sandbox", {})
    storage = overrides.pop("storage", {})
    return load_config(
        overrides={
            "storage": {"home": str(home), **storage},
            "temporal": {"address": address, "task_queue": unique("tq")},
            "sandbox": {"allow_host_bash": True, **sandbox},
            "run": {"model_call": {"heartbeat_seconds": 5}, "tool_call": {"heartbeat_seconds": 5}, **run},
            **overrides,
        },
        environ={},
    )


@contextlib.asynccontextmanager
async def running_worker(client: Client, config: HartflowConfig, **options: Any) -> AsyncIterator[None]:
    """A worker for ``config`` on ``client``'s connection, with ``config``'s converter (its claim check). It stops
    as every in-process worker does: no run it cached outlives it (``workers/worker_stop.py``)."""
    async with running(build_worker(client_for(client, config), config, **options)):
        yield


async def settle(handle: WorkflowHandle[Any, Any]) -> RunView:
    """Wait (event-driven, through the run's update) until the run pauses or ends."""
    view: RunView = await handle.execute_update("wait_settled", result_type=RunView)
    return view
