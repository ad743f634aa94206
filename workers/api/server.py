"""``hartflow serve``: the app on uvicorn, announced on stderr once it answers.

The listening socket is bound by :func:`listen` before anything else starts (the embedded Temporal stack, the
app): a busy port or an address this machine does not have is one line and exit 2, where uvicorn would log a
traceback and exit the process from inside its own task.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
import socket
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


class ListenError(Exception):
    """The address cannot be listened on (busy, not this machine's); the message is one line."""


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` (as uvicorn would bind it), or :class:`ListenError`."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart may reuse a port in TIME_WAIT
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        if exc.errno == errno.EADDRINUSE:
            reason += " (another server listens there: stop it or choose another --port)"
        raise ListenError(f"cannot listen on {host}:{port}: {reason}") from None
    sock.set_inheritable(True)
    return sock


async def serve(config: HartflowConfig, client: Client, sock: socket.socket, host: str) -> None:
    """Serve on the listening ``sock`` (from :func:`listen` on ``host``) until SIGINT/SIGTERM."""
    server = _Server(uvicorn.Config(create_app(config, client), log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.05)  # uvicorn exposes no start event; it sets `started` once the socket listens
    if server.started:
        print(f"API: http://{host}:{sock.getsockname()[1]}", file=sys.stderr, flush=True)
    await task
