"""``hartflow serve``: the app on uvicorn, announced on stderr once it answers."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Iterator

import uvicorn
from temporalio.client import Client

from workers.api.app import create_app
from workers.config import HartflowConfig

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Shut down gracefully on SIGINT/SIGTERM and return. (uvicorn's own handling re-raises the signal after
        its shutdown, which would kill the process before the embedded stack it serves for is stopped.)"""
        loop = asyncio.get_running_loop()
        for sig in _STOP_SIGNALS:
            loop.add_signal_handler(sig, self.handle_exit, sig, None)
        try:
            yield
        finally:
            for sig in _STOP_SIGNALS:
                loop.remove_signal_handler(sig)


async def serve(config: HartflowConfig, client: Client, host: str, port: int) -> None:
    """Serve until SIGINT/SIGTERM."""
    server = _Server(
        uvicorn.Config(create_app(config, client), host=host, port=port, log_level="warning", lifespan="off")
    )
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():
        await asyncio.sleep(0.05)  # uvicorn exposes no start event; it sets `started` once the socket listens
    if server.started:
        bound = server.servers[0].sockets[0].getsockname()[1] if server.servers else port
        print(f"API: http://{host}:{bound}", file=sys.stderr, flush=True)
    await task
