"""The probes that tell ``workers/devserver.py``'s ``DevServer`` its server is ready for hartflow.

Ready means: the gRPC frontend answers for the namespace, hartflow's search attributes are registered (a workflow
started right away may upsert them), and the Web UI answers 200. The probes are coroutines, run on a private loop
in a helper thread so that ``DevServer.start`` can block from any thread, inside a running loop or not.
"""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError

from workers.search_attribute_setup import SearchAttributeTypeMismatch, missing_search_attributes

POLL_INTERVAL = 0.05
"""Short enough that readiness is noticed within a few tens of ms (a restart on an existing DB is ready in
~0.25 s), long enough not to spin a core of the 2-core CI machine."""
_PROBE_RPC_TIMEOUT = timedelta(seconds=1)


def run_on_private_loop(coro: Coroutine[Any, Any, None]) -> None:
    """Run a readiness coroutine on a private loop in a helper thread.

    `asyncio.run` on the caller's thread would fail inside a running loop and, outside one, would replace
    that thread's current event loop (which pytest-asyncio and other frameworks keep). The pool is not
    joined on the way out: after a Ctrl-C, `start` kills the server, and the probe then ends at once.
    """
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="devserver-ready")
    try:
        pool.submit(asyncio.run, coro).result()
    finally:
        pool.shutdown(wait=False)


async def grpc_ready(address: str, namespace: str, *, search_attributes: bool, deadline: float) -> bool:
    """One attempt: connect, then ask for the namespace (and, with ``search_attributes``, hartflow's)."""
    try:
        async with asyncio.timeout(max(0.1, min(2.0, deadline - time.monotonic()))):
            client = await Client.connect(address, namespace=namespace)
            await client.workflow_service.describe_namespace(
                DescribeNamespaceRequest(namespace=namespace), timeout=_PROBE_RPC_TIMEOUT
            )
            if search_attributes:
                return not await missing_search_attributes(client, namespace)
            return True
    except SearchAttributeTypeMismatch:
        raise  # waiting would not fix it
    except (RuntimeError, RPCError, TimeoutError):
        return False


def http_ok(url: str) -> bool:
    """Whether ``url`` answers 200 within a second."""
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False
