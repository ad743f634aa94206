"""Riding out a Temporal server or a storage that is briefly away (a restart, a failover) instead of failing the
request.

The SDK's client already retries an unreachable server for about ten seconds per call before it raises
``RPCError`` with ``UNAVAILABLE`` (``tcp connect error``), or ``UNKNOWN`` ("transport error") when a call in flight
loses its connection. A stream that follows a live run should outlast a server restart without its consumer
noticing: :func:`riding_out` calls again until the server answers or :data:`OUTAGE_BUDGET_SECONDS` have passed.
Anything else an RPC raises is not an outage and propagates at once. The same helper rides out storage
(``storage_down``) where a write must follow what Temporal already did: the record of a reply the run took.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

from activities.storage import StorageError

OUTAGE_BUDGET_SECONDS = 60.0
"""How long a request waits for an unreachable server to come back before it gives up (503 / an ``error`` frame)."""
_PAUSE_SECONDS = 0.5

_log = logging.getLogger("hartflow.api")
T = TypeVar("T")


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the server could not be reached (as opposed to the server answering with an error)."""
    if isinstance(exc, WorkflowUpdateRPCTimeoutOrCancelledError):
        return True  # the update's RPC ran out of time: the server did not answer
    if not isinstance(exc, RPCError):
        return False
    return exc.status == RPCStatusCode.UNAVAILABLE or (
        exc.status == RPCStatusCode.UNKNOWN and "transport error" in exc.message
    )


def storage_down(exc: BaseException) -> bool:
    """Whether ``exc`` is storage failing (down, throttling): the API answers it with a 503 anyway."""
    return isinstance(exc, StorageError)


async def riding_out(
    call: Callable[[], Awaitable[T]],
    what: str,
    *,
    outage: Callable[[BaseException], bool] = unreachable,
    service: str = "Temporal",
) -> T:
    """``call()``, called again while ``outage`` says its failure is one (Temporal unreachable, by default), for
    at most :data:`OUTAGE_BUDGET_SECONDS`."""
    deadline = time.monotonic() + OUTAGE_BUDGET_SECONDS
    while True:
        try:
            return await call()
        except Exception as exc:
            if not outage(exc) or time.monotonic() >= deadline:
                raise
            _log.warning("%s unavailable while %s, trying again: %s", service, what, exc)
        await asyncio.sleep(_PAUSE_SECONDS)
