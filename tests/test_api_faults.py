"""The Agent Server under the faults bench.soak found it mishandling: a live stream whose run closes under it
(the consumer read the chain as open, the run ended before the stream's next poll: the poll is refused, no
worker replays a closed run, and the rest comes from the run's archive instead of a 500), and storage down (503
with a one-line reason, which clients retry, instead of an unhandled exception)."""

from __future__ import annotations

from pathlib import Path

import pytest
from langgraph_sdk import get_client
from temporalio.client import Client

from tests.support import answer, calls, make_config, running_worker, tool_call, write_script
from tests.support.inprocess_api import serving_api
from tests.support.s3server import S3Server, s3_storage_settings
from vocabulary.contracts import ThreadRef
from workers.api import records
from workers.api.status import Chain, chain
from workers.api.stream import RunFrames, run_frames
from workers.config import open_object_store
from workers.worker import connect

MODES = ["values", "messages-tuple", "updates", "custom"]


async def test_a_stream_that_saw_its_run_open_reads_the_rest_from_the_archive(
    client: Client, home: Path, temporal_address: str, tmp_path: Path
) -> None:
    script = write_script(tmp_path, [calls(tool_call("bash", command="echo hi")), answer("all done")])
    config = make_config(home, temporal_address, model=script)
    async with running_worker(client, config):
        api_client = await connect(config)  # as every hartflow client: queries go out NOT_OPEN
        async with serving_api(config, api_client) as url:
            sdk = get_client(url=url)
            thread_id = (await sdk.threads.create())["thread_id"]
            run = await sdk.runs.create(thread_id, "hartflow", input={"messages": [{"role": "user", "content": "go"}]})
            await sdk.runs.join(thread_id, run["run_id"])
    thread = ThreadRef(config.user_id, thread_id)
    objects = open_object_store(config)
    record = records.run_record(objects, thread, run["run_id"])
    assert record is not None
    closed = await chain(api_client, thread)
    seen_open = Chain(closed.first_run_id, "running")  # what a consumer read just before the run closed
    assert closed.status == "completed"

    live = [f async for f in run_frames(api_client, objects, thread, RunFrames(record, MODES), None, seen_open)]
    archived = [f async for f in run_frames(api_client, objects, thread, RunFrames(record, MODES), None, closed)]
    assert live == archived
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
