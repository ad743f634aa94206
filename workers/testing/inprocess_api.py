"""The Agent Server app on a real uvicorn bound to loopback, inside the test's own event loop (no subprocess:
the test's worker, storage and Temporal client are the app's).

The listening socket is bound before uvicorn starts, so a client may connect at once: connections wait in the
socket's backlog until the server accepts them (nothing polls for readiness).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import uvicorn
from temporalio.client import Client

from workers.api.app import create_app
from workers.config import HartflowConfig


@contextlib.asynccontextmanager
async def serving_api(config: HartflowConfig, client: Client) -> AsyncIterator[str]:
    """Serve ``create_app(config, client)`` on 127.0.0.1; yields the base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(config, client), log_level="warning", lifespan="off", timeout_graceful_shutdown=5)
    )
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()
