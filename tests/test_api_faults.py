"""The Agent Server under the faults bench.soak found it mishandling: a live stream whose run closes under it
(the consumer read the chain as open, the run ended before the stream's next poll: the poll is refused, no
worker replays a closed run, and the rest comes from the run's archive instead of a 500), storage down (503
with a one-line reason, which clients retry, instead of an unhandled exception), and the Temporal server
restarted under a live stream (ridden out by the server: the consumer misses nothing and sees nothing twice,
no traceback) or down for a plain request (503), and a run whose record never reached storage (found from its
workflow's memo, so a client's retry joins it instead of starting it twice)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from temporalio.client import Client

from vocabulary.contracts import ThreadRef
from vocabulary.workflow_ids import run_workflow_id
from workers.api import records, starting
from workers.api.deps import ApiContext
from workers.api.outages import riding_out, storage_down
from workers.api.run_request import RunCreate
from workers.api.status import Chain, chain
from workers.api.stream import RunFrames, run_frames
from workers.client.runs import Runs
from workers.config import HartflowConfig, open_object_store
from workers.testing import answer, calls, make_config, running_worker, serving_api, tool_call, write_script
from workers.testing.processes import wait_for_file, worker_process
from workers.testing.s3 import S3Server, s3_storage_settings
from workers.testing.temporal import private_dev_server
from workers.worker import connect

MODES = ["values", "messages-tuple", "updates", "custom"]


async def _finished_run(config: HartflowConfig, api_client: Client) -> tuple[ThreadRef, records.RunRecord, Chain]:
    """One run on a new thread through the API (the official client), joined until it ended: its thread, its
    record and the thread's closed chain."""
    async with serving_api(config, api_client) as url:
        sdk = get_client(url=url)
        thread_id = (await sdk.threads.create())["thread_id"]
        run = await sdk.runs.create(thread_id, "hartflow", input={"messages": [{"role": "user", "content": "go"}]})
        await sdk.runs.join(thread_id, run["run_id"])
    thread = ThreadRef(config.user_id, thread_id)
    record = records.run_record(open_object_store(config), thread, run["run_id"])
    assert record is not None
    return thread, record, await chain(api_client, thread)


async def test_a_stream_that_saw_its_run_open_reads_the_rest_from_the_archive(
    client: Client, home: Path, temporal_address: str, tmp_path: Path
) -> None:
    script = write_script(tmp_path, [calls(tool_call("bash", command="echo hi")), answer("all done")])
    config = make_config(home, temporal_address, model=script)
    async with running_worker(client, config):
        api_client = await connect(config)  # as every hartflow client: queries go out NOT_OPEN
        thread, record, closed = await _finished_run(config, api_client)
    objects = open_object_store(config)
    seen_open = Chain(closed.first_run_id, "running")  # what a consumer read just before the run closed
    assert closed.status == "completed"

    live = [f async for f in run_frames(api_client, objects, thread, RunFrames(record, MODES), None, seen_open)]
    archived = [f async for f in run_frames(api_client, objects, thread, RunFrames(record, MODES), None, closed)]
    # An answer's messages frames differ by design: live they are token chunks, from the archive the whole message
    # (tests/test_live_tokens.py); every other frame, and its id, is the same either way.
    assert _without_answers(live) == _without_answers(archived)
    assert [f.data["kind"] for f in live if f.event == "custom"][-1] == "run_finished"
    assert [f.data for f in live if f.event == "values"][-1]["messages"][-1]["content"] == "all done"


async def test_storage_down_is_a_503_the_client_can_retry(
    client: Client, home: Path, temporal_address: str, tmp_path: Path
) -> None:
    s3 = S3Server(tmp_path / "s3")
    s3.start()
    try:
        config = make_config(home, temporal_address, storage=s3_storage_settings(s3, s3.create_bucket("api-down")))
        async with serving_api(config, await connect(config)) as url:
            sdk = get_client(url=url)
            thread_id = (await sdk.threads.create())["thread_id"]
            s3.stop()
            with pytest.raises(Exception) as refused:
                await sdk.runs.list(thread_id)
            response = refused.value.response  # type: ignore[attr-defined]
            assert response.status_code == 503
            assert response.json()["detail"].startswith("storage unavailable: S3 ")
            s3.start()
            assert await sdk.runs.list(thread_id) == []
    finally:
        s3.stop()


async def test_a_stream_reading_a_closed_runs_archive_rides_out_storage_down(
    client: Client, home: Path, temporal_address: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A closed run's frames come from its archive in storage: a storage outage then is waited out (the consumer
    gets every frame once S3 is back), not an exception raised after the response started."""
    s3 = S3Server(tmp_path / "s3")
    s3.start()
    try:
        storage = s3_storage_settings(s3, s3.create_bucket("archive-down"))
        config = make_config(home, temporal_address, storage=storage, model=write_script(tmp_path, [answer("kept")]))
        async with running_worker(client, config):
            api_client = await connect(config)
            thread, record, closed = await _finished_run(config, api_client)
        objects = open_object_store(config)
        with caplog.at_level(logging.WARNING, logger="hartflow.api"):
            async with s3.down():
                frames = asyncio.ensure_future(
                    _collect(run_frames(api_client, objects, thread, RunFrames(record, MODES), None, closed))
                )
                while not frames.done() and not any(
                    "storage unavailable while reading the archive" in m for m in _api_logs(caplog)
                ):
                    await asyncio.sleep(0.1)
                assert not frames.done(), "the archive read gave up (or raised) while storage was down"
            read = await frames
    finally:
        s3.stop()
    assert [f.data["kind"] for f in read if f.event == "custom"][-1] == "run_finished"
    assert [f.data for f in read if f.event == "values"][-1]["messages"][-1]["content"] == "kept"


async def _collect(frames: Any) -> list[Any]:
    return [frame async for frame in frames]


async def test_a_stream_rides_out_a_temporal_restart_and_a_request_meanwhile_is_a_503(
    home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    slow = "touch slow-started; while [ ! -f gate ]; do sleep 0.05; done; echo slow-end"
    async with private_dev_server(tmp_path / "temporal.db") as server:
        model = write_script(tmp_path, [calls(tool_call("bash", "slow", command=slow)), answer("survived")])
        # Heartbeats far apart: the tool's attempt in flight must outlive the outage, not time out during it.
        config = make_config(home, server.address, model=model, run={"tool_call": {"heartbeat_seconds": 60}})
        with worker_process(config, tmp_path / "worker.yaml"):
            async with serving_api(config, await connect(config)) as url:
                sdk = get_client(url=url)
                thread_id = (await sdk.threads.create())["thread_id"]
                workspace = home / f"users/default/threads/{thread_id}/user-data/workspace"
                parts: list[Any] = []

                async def consume() -> None:
                    body = {"messages": [{"role": "user", "content": "go"}]}
                    async for part in sdk.runs.stream(thread_id, "hartflow", input=body, stream_mode=MODES):
                        parts.append(part)

                consumer = asyncio.create_task(consume())
                await wait_for_file(workspace / "slow-started")
                with caplog.at_level(logging.WARNING):
                    server.kill()  # SIGKILL: what a crash looks like to the SQLite file
                    with pytest.raises(Exception) as refused:
                        await sdk.threads.get_state(thread_id)  # needs Temporal: the run's chain
                    # Down past the SDK client's own retries (~10 s), until the stream's poll has given up once.
                    while not any(m.startswith("Temporal unreachable while streaming") for m in _api_logs(caplog)):
                        await asyncio.sleep(0.1)
                    await asyncio.to_thread(server.start)
                    (workspace / "gate").touch()
                    await asyncio.wait_for(consumer, timeout=180)

    assert refused.value.response.status_code == 503  # type: ignore[attr-defined]
    assert refused.value.response.json()["detail"].startswith("Temporal unavailable: ")  # type: ignore[attr-defined]
    ids = [part.id for part in parts if part.event != "end"]  # the SSE client repeats the last id on ``end``
    assert len(ids) == len(set(ids)), f"an event was delivered twice: {ids}"
    assert [p.data["kind"] for p in parts if p.event == "custom"][-1] == "run_finished"
    assert [p.data for p in parts if p.event == "values"][-1]["messages"][-1]["content"] == "survived"
    assert [p.event for p in parts if p.event in ("error", "end")] == ["end"], "the stream ended on its own, cleanly"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "no traceback, no error"


def _api_logs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "hartflow.api"]


async def test_a_run_whose_record_never_reached_storage_is_found_and_joined_not_started_twice(
    client: Client, home: Path, temporal_address: str, tmp_path: Path
) -> None:
    """What a server killed between starting a run's workflow and writing its record (or storage failing just
    then) leaves behind: a workflow and no record. The client's retry must find that run, not start another."""
    workspace_of = lambda thread_id: home / f"users/default/threads/{thread_id}/user-data/workspace"  # noqa: E731
    slow = "touch started; while [ ! -f gate ]; do sleep 0.05; done; echo once >> log"
    script = write_script(tmp_path, [calls(tool_call("bash", "slow", command=slow)), answer("all done")])
    config = make_config(home, temporal_address, model=script)
    async with running_worker(client, config):
        api_client = await connect(config)
        async with serving_api(config, api_client) as url:
            sdk = get_client(url=url)
            thread_id = (await sdk.threads.create())["thread_id"]
            body = RunCreate(input={"messages": [{"role": "user", "content": "go"}]}, stream_mode=MODES)
            workflow_id = run_workflow_id(config.user_id, thread_id)
            started = starting._record(ThreadRef(config.user_id, thread_id), body, workflow_id, "", 0)
            # The start as the API does it, and then nothing: the server died before the record was written.
            context, thread = ApiContext(config, api_client), ThreadRef(config.user_id, thread_id)
            run = await starting._prepare(context, thread, body, started, None, [], None, None)
            await Runs(api_client, config.temporal.task_queue).start(run)
            await wait_for_file(workspace_of(thread_id) / "started")

            listed = await sdk.runs.list(thread_id)
            with pytest.raises(Exception) as busy:  # a retry that starts again is refused while the run is on
                await sdk.runs.create(  # (the default, enqueue, would queue it: a second message, not a retry)
                    thread_id,
                    "hartflow",
                    input={"messages": [{"role": "user", "content": "go"}]},
                    multitask_strategy="reject",
                )
            (workspace_of(thread_id) / "gate").touch()
            joined = await sdk.runs.join(thread_id, started.run_id)
            after = await sdk.runs.list(thread_id)

    assert [run["run_id"] for run in listed] == [started.run_id]
    assert busy.value.response.status_code == 409  # type: ignore[attr-defined]
    assert joined["messages"][-1]["content"] == "all done"
    assert [(run["run_id"], run["status"]) for run in after] == [(started.run_id, "success")]
    thread = ThreadRef(config.user_id, thread_id)
    assert records.run_record(open_object_store(config), thread, started.run_id) is not None, "written on first read"
    assert (workspace_of(thread_id) / "log").read_text() == "once\n"


async def test_a_record_that_must_follow_a_reply_is_written_once_storage_is_back(
    home: Path, temporal_address: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The record of a reply the run already took has no memo to come back from: its write waits out the outage
    (``workers/api/starting.py``, ``riding_out(..., outage=storage_down)``)."""
    s3 = S3Server(tmp_path / "s3")
    s3.start()
    try:
        config = make_config(home, temporal_address, storage=s3_storage_settings(s3, s3.create_bucket("reply-down")))
        objects = open_object_store(config)
        thread = ThreadRef(config.user_id, "t-reply")
        record = records.RunRecord(
            str(uuid.uuid4()), "t-reply", "hartflow", run_workflow_id(config.user_id, "t-reply"), "run", 3, "now"
        )
        s3.stop()
        with caplog.at_level(logging.WARNING):
            write = asyncio.create_task(
                riding_out(
                    lambda: asyncio.to_thread(records.save_run_record, objects, thread, record),
                    "recording a reply",
                    outage=storage_down,
                    service="storage",
                )
            )
            while not any(m.startswith("storage unavailable while recording") for m in _api_logs(caplog)):
                await asyncio.sleep(0.1)
            s3.start()
            await write
        assert records.run_record(objects, thread, record.run_id) == record
    finally:
        s3.stop()


def _without_answers(frames: list[Any]) -> list[Any]:
    return [f for f in frames if not (f.event == "messages" and f.data[0].get("type") in ("ai", "AIMessageChunk"))]
