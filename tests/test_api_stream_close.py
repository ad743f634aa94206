"""A live API stream whose run closes under it: the consumer read the chain as open, then the run ended before
the stream's next poll. The poll is refused (no worker replays a closed run), and the rest of the stream comes
from the run's archive instead of the refusal ending the response with a server error (found by bench.soak)."""

from __future__ import annotations

from pathlib import Path

from langgraph_sdk import get_client
from temporalio.client import Client

from tests.support import answer, calls, make_config, running_worker, tool_call, write_script
from tests.support.inprocess_api import serving_api
from workers.api import records
from workers.api.status import Chain, chain
from workers.api.stream import RunFrames, run_frames
from workers.config import open_object_store
from workers.worker import connect
from workflows.contracts import ThreadRef

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
