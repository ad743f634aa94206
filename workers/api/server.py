"""``hartflow serve``: the app on uvicorn, announced on stderr once it answers."""

from __future__ import annotations

import asyncio
import sys

import uvicorn
from temporalio.client import Client

from workers.api.app import create_app
from workers.config import HartflowConfig


async def serve(config: HartflowConfig, client: Client, host: str, port: int) -> None:
    """Serve until SIGINT/SIGTERM (uvicorn handles both and shuts down gracefully)."""
    server = uvicorn.Server(
        uvicorn.Config(create_app(config, client), host=host, port=port, log_level="warning", lifespan="off")
    )
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():
        await asyncio.sleep(0.05)  # uvicorn exposes no start event; it sets `started` once the socket listens
    if server.started:
        bound = server.servers[0].sockets[0].getsockname()[1] if server.servers else port
        print(f"API: http://{host}:{bound}", file=sys.stderr, flush=True)
    await task
