"""Stopping an in-process worker without leaving a run behind.

A worker keeps the runs it served in its cache (``max_cached_workflows``) between workflow tasks: a run paused for
clarification stays there as a suspended coroutine. Shutting the worker down (temporalio 1.35) evicts none of
them: Core stops polling and the Python worker's table of running workflows keeps every instance. Such an
orphan lives on until a garbage collection closes its coroutine by throwing ``GeneratorExit`` into it, and that
collection runs on whatever thread triggers it, possibly inside another run's activation. Whatever the orphan
does then (a ``finally``, an ``await`` a swallowed exception leads to) resolves ``workflow.*`` to the run that
owns that thread: its commands land in the other run's history.

So every in-process worker is stopped through :func:`evict_cached_runs`: after the worker has shut down, each
run still cached gets the eviction activation Core sends when it evicts a run from a full cache (its tasks are
cancelled and run to their end inside its own event loop, on a thread of its own), the instance is dropped, and
a collection on the calling thread frees what is left, where no workflow runs. The history is not touched: the
next worker replays the run from it, as after any eviction.

The SDK has no public call for this; the names used here are temporalio 1.35.0's (pinned in pyproject.toml),
and ``tests/test_orphans.py`` fails if they stop doing what this module relies on.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator
from typing import Any

from temporalio.bridge.proto.workflow_activation import RemoveFromCache, WorkflowActivation, WorkflowActivationJob
from temporalio.worker import Worker

_log = logging.getLogger(__name__)

EVICTION_MESSAGE = "hartflow: the worker stopped"
TEARDOWN_SECONDS = 10.0
"""How long a run may take to end once evicted (a well-behaved one takes milliseconds: its tasks are cancelled
and it issues no command). The SDK's deadlock detector allows an activation 2 s; this is a bound for a loaded
machine, after which the stop goes on and says which run would not end."""


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[Worker]:
    """``async with worker`` that leaves no cached run behind (:func:`evict_cached_runs`) when it ends."""
    try:
        async with worker:
            yield worker
    finally:
        await evict_cached_runs(worker)


def cached_runs(worker: Worker) -> list[str]:
    """The run ids the worker holds in its workflow cache."""
    return list(_cache(worker))


async def evict_cached_runs(worker: Worker) -> list[str]:
    """Tear down every run a stopped worker still caches, then collect garbage here; returns their run ids.

    A worker that still runs is shut down first (one with cached runs has started, so its shutdown returns). A
    run whose teardown fails (it swallowed the cancellation and kept tasks alive) is logged as an error: it is a
    bug in workflow code, and the run is dropped from the cache all the same."""
    cache = _cache(worker)
    if cache and not worker.is_shutdown:
        await worker.shutdown()
    evicted = list(cache)
    for run_id in evicted:
        running_workflow = cache.pop(run_id)
        if running_workflow.deadlocked_activation_task is not None:
            # Its thread may still be running workflow code: tearing it down now would race that thread.
            _log.error("run %s is deadlocked; its stopped worker cannot evict it", run_id)
            continue
        try:
            await asyncio.wait_for(asyncio.to_thread(running_workflow.activate, _eviction(run_id)), TEARDOWN_SECONDS)
        except TimeoutError:
            _log.error("run %s was still running %s s after its stopped worker evicted it", run_id, TEARDOWN_SECONDS)
        except Exception:
            _log.exception("run %s did not end when its stopped worker evicted it", run_id)
    gc.collect()
    return evicted


def _cache(worker: Worker) -> dict[str, Any]:
    workflow_worker = worker._workflow_worker
    if workflow_worker is None:
        return {}
    cache: dict[str, Any] = workflow_worker._running_workflows
    return cache


def _eviction(run_id: str) -> WorkflowActivation:
    activation = WorkflowActivation(run_id=run_id, is_replaying=True)
    activation.timestamp.GetCurrentTime()
    activation.jobs.append(
        WorkflowActivationJob(
            remove_from_cache=RemoveFromCache(
                message=EVICTION_MESSAGE, reason=RemoveFromCache.EvictionReason.LANG_REQUESTED
            )
        )
    )
    return activation
