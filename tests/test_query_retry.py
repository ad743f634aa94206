"""QueryReplayRetry: a query whose replay hit a nondeterminism error is asked again, and real nondeterminism
still fails. Both workflows here are nondeterministic on purpose, only when replayed, and only as the test
says; a fresh worker answers each query, so every query is a replay."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.worker import Worker

from tests.support import unique
from workers.query_retry import QUERY_ATTEMPTS, QueryReplayRetry

_flaky_replays = itertools.count()


@activity.defn(name="query_retry.original")
async def original() -> None:
    pass


@activity.defn(name="query_retry.different")
async def different() -> None:
    pass


async def _run_activity(name: str) -> None:
    await workflow.execute_activity(name, start_to_close_timeout=timedelta(seconds=30))


@workflow.defn(name="QueryRetryOnceDrifting", sandboxed=False)
class OnceDrifting:
    """Replays differently the first time only: the core race the interceptor rides out looks like this."""

    @workflow.run
    async def run(self) -> None:
        drift = workflow.unsafe.is_replaying() and next(_flaky_replays) == 0
        await _run_activity("query_retry.different" if drift else "query_retry.original")

    @workflow.query
    def ping(self) -> str:
        return "pong"


@workflow.defn(name="QueryRetryAlwaysDrifting", sandboxed=False)
class AlwaysDrifting:
    """Replays differently every time: a real determinism bug."""

    @workflow.run
    async def run(self) -> None:
        await _run_activity("query_retry.different" if workflow.unsafe.is_replaying() else "query_retry.original")

    @workflow.query
    def ping(self) -> str:
        return "pong"


def _worker(client: Client, task_queue: str) -> Worker:
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[OnceDrifting, AlwaysDrifting],
        activities=[original, different],
    )


async def _finished(client: Client, workflow: type, task_queue: str) -> str:
    workflow_id = unique("query-retry")
    async with _worker(client, task_queue):
        await client.execute_workflow(workflow.run, id=workflow_id, task_queue=task_queue)  # type: ignore[attr-defined]
    return workflow_id


async def test_a_query_whose_replay_drifted_once_is_answered(client: Client, caplog: pytest.LogCaptureFixture) -> None:
    task_queue = unique("tq")
    workflow_id = await _finished(client, OnceDrifting, task_queue)
    async with _worker(client, task_queue):
        answer = await client.get_workflow_handle(workflow_id).query(OnceDrifting.ping)
    assert answer == "pong"
    retries = [r.getMessage() for r in caplog.records if r.name == "workers.query_retry"]
    assert len(retries) == 1 and "[TMPRL1100]" in retries[0] and "query_retry.different" in retries[0]


async def test_real_nondeterminism_still_fails_the_query(client: Client, caplog: pytest.LogCaptureFixture) -> None:
    task_queue = unique("tq")
    workflow_id = await _finished(client, AlwaysDrifting, task_queue)
    # The default attempts and pauses, only shorter: the same 8 replays, without waiting 16 s for them.
    quick = Client(**{**client.config(), "interceptors": [QueryReplayRetry(first_delay=0.01, max_delay=0.05)]})
    async with _worker(client, task_queue):
        with pytest.raises(WorkflowQueryFailedError, match=r"\[TMPRL1100\].*query_retry\.original"):
            await quick.get_workflow_handle(workflow_id).query(AlwaysDrifting.ping)
    retries = [r for r in caplog.records if r.name == "workers.query_retry"]
    assert len(retries) == QUERY_ATTEMPTS - 1
