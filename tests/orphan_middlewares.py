"""Test middleware for the orphan tests, loaded into runs through ``run.extensions`` (``module:Class``, zero-arg)."""

from __future__ import annotations

import gc

from middlewares.base import Middleware
from middlewares.context import RunContext
from vocabulary.state import StateUpdate, ThreadState


class CollectGarbage(Middleware):
    """before_model: a full garbage collection inside this run's activation, on its workflow thread, as the
    interpreter may run one at any allocation. Whatever coroutine the collection closes runs its last code here."""

    async def before_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        gc.collect()
        return None
