"""Durable streams through the official ``langgraph-sdk`` client: rejoining after the client dropped (from any
event id, ``-1`` = the whole run), the SDK reconnecting by itself when a proxy cuts the connection,
``on_disconnect="cancel"``, and the HTTP server killed and restarted while a run is paused, or a second server
process answering for the first. ``hartflow serve`` runs as its own process where a process dies."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from temporalio.client import Client, WorkflowFailureError

from tests.support import two_api_servers
from vocabulary.contracts import ThreadRef
from vocabulary.workflow_ids import run_workflow_id
from workers.api import records
from workers.api.status import Chain
from workers.api.stream import RunFrames, run_frames
from workers.config import HartflowConfig, open_object_store
from workers.testing import answer, calls, make_config, running_worker, serving_api, tool_call, unique, write_script
from workers.testing.api_server import CuttingProxy
from workers.worker import connect

MODES = ["values", "messages-tuple", "updates", "custom"]


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def frames(parts: list[Any]) -> list[tuple[str, str | None, Any]]:
    """What a consumer saw, without the per-connection framing (``metadata`` first, ``end`` last) and without the
    answers' ``messages`` frames: live, an answer comes as token chunks; once its run closed, whole (the durable
    frames are the same either way; tests/test_live_tokens.py covers the tokens)."""
    return [(p.event, p.id, p.data) for p in parts if p.event not in ("metadata", "end") and not _answer(p)]


def _answer(part: Any) -> bool:
    return bool(part.event == "messages" and part.data[0].get("type") in ("ai", "AIMessageChunk"))


async def collect(parts: AsyncIterator[Any]) -> list[Any]:
    return [part async for part in parts]


async def until_values(parts: AsyncIterator[Any]) -> list[Any]:
    """Read up to and including the first ``values`` frame, then drop the connection."""
    seen = []
    async for part in parts:
        seen.append(part)
        if part.event == "values":
            break
    await parts.aclose()  # type: ignore[attr-defined]
    return seen


@pytest.fixture
def release(tmp_path: Path) -> Path:
    return tmp_path / "release"


@pytest.fixture
def api_config(home: Path, temporal_address: str, tmp_path: Path, release: Path) -> HartflowConfig:
    """A run that uses a tool, then holds its answer until ``release`` exists."""
    script = write_script(
        tmp_path,
        [calls(tool_call("bash", command="echo step")), {"content": "released", "wait_for_file": str(release)}],
    )
    recorder = ["tests.support.recording_middlewares:RecorderA"]
    return make_config(home, temporal_address, model=script, run={"extensions": recorder})


@pytest.fixture
async def worker(client: Client, api_config: HartflowConfig) -> AsyncIterator[Client]:
    async with running_worker(client, api_config):
        yield await connect(api_config)  # the client hartflow serve makes (closed runs: never queried)


async def test_join_stream_after_a_drop_from_any_event_id(
    worker: Client, api_config: HartflowConfig, release: Path
) -> None:
    async with serving_api(api_config, worker) as url:
        sdk = get_client(url=url)
        thread_id = (await sdk.threads.create())["thread_id"]
        first = await until_values(sdk.runs.stream(thread_id, "hartflow", input=user("go"), stream_mode=MODES))
        run_id = first[0].data["run_id"]
        assert (await sdk.runs.get(thread_id, run_id))["status"] == "running"
        release.touch()
        rest = await collect(sdk.runs.join_stream(thread_id, run_id, stream_mode=MODES, last_event_id=first[-1].id))
        assert rest[-1].event == "end"
        whole = frames(first) + frames(rest)
        assert whole[-1][0] == "custom" and whole[-1][2]["kind"] == "run_finished"
        assert [p for p in whole if p[0] == "values"][-1][2]["messages"][-1]["content"] == "released"
        assert (
            frames(await collect(sdk.runs.join_stream(thread_id, run_id, stream_mode=MODES, last_event_id="-1")))
            == whole
        )
        for index, (_, event_id, _) in enumerate(whole):
            joined = await collect(sdk.runs.join_stream(thread_id, run_id, stream_mode=MODES, last_event_id=event_id))
            assert frames(joined) == whole[index + 1 :]
        assert (await sdk.runs.join(thread_id, run_id))["messages"][-1]["content"] == "released"


async def test_the_sdk_reconnects_by_itself_when_a_proxy_cuts_the_stream(
    worker: Client, api_config: HartflowConfig, release: Path
) -> None:
    async with serving_api(api_config, worker) as url:
        port = int(url.rsplit(":", 1)[1])
        async with CuttingProxy(port) as proxy:
            sdk = get_client(url=proxy.url)
            thread_id = (await sdk.threads.create())["thread_id"]
            seen: list[Any] = []
            connections_at_cut: int | None = None
            async for part in sdk.runs.stream(thread_id, "hartflow", input=user("go"), stream_mode=MODES):
                seen.append(part)
                if part.event == "values" and connections_at_cut is None:
                    connections_at_cut = proxy.connections
                    proxy.cut()  # mid-stream: the run is held until `release` exists
                    release.touch()
            assert connections_at_cut is not None and proxy.connections > connections_at_cut  # it reconnected
        run_id = seen[0].data["run_id"]
        whole = await collect(
            get_client(url=url).runs.join_stream(thread_id, run_id, stream_mode=MODES, last_event_id="-1")
        )
        assert frames(seen) == frames(whole)
        assert [p.event for p in seen].count("metadata") == 1


async def test_on_disconnect_cancel_cancels_the_run_and_after_agent_ran(
    worker: Client, api_config: HartflowConfig
) -> None:
    async with serving_api(api_config, worker) as url:
        sdk = get_client(url=url)
        thread_id = (await sdk.threads.create())["thread_id"]
        parts = sdk.runs.stream(thread_id, "hartflow", input=user("go"), stream_mode=MODES, on_disconnect="cancel")
        first = await until_values(parts)
        with pytest.raises(WorkflowFailureError):
            await worker.get_workflow_handle(run_workflow_id(api_config.user_id, thread_id)).result()
        run_id = first[0].data["run_id"]
        assert (await sdk.runs.get(thread_id, run_id))["status"] == "interrupted"
        assert (await sdk.threads.get(thread_id))["status"] == "idle"
        events = await collect(sdk.runs.join_stream(thread_id, run_id, stream_mode="custom", last_event_id="-1"))
        hooks = [p.data["hook"] for p in events if p.event == "custom" and p.data["kind"] == "hook"]
        assert hooks[-1] == "after_agent"
        assert [p.data for p in events if p.event == "custom"][-1]["status"] == "cancelled"


@pytest.fixture
def ask_config(home: Path, temporal_address: str, tmp_path: Path) -> HartflowConfig:
    ask = calls(
        tool_call(
            "ask_clarification",
            unique("call"),
            question="Which colour?",
            clarification_type="approach_choice",
            options=["red", "blue"],
        )
    )
    return make_config(home, temporal_address, model=write_script(tmp_path, [ask, answer("blue it is")]))


async def test_a_paused_run_survives_a_server_restart_and_another_server_resumes_it(
    client: Client, ask_config: HartflowConfig, tmp_path: Path
) -> None:
    with two_api_servers(ask_config, tmp_path) as (first, second):
        async with running_worker(client, ask_config):
            first.start()
            sdk = get_client(url=first.url)
            thread_id = (await sdk.threads.create())["thread_id"]
            paused = await collect(sdk.runs.stream(thread_id, "hartflow", input=user("pick"), stream_mode=MODES))
            run_id = paused[0].data["run_id"]
            interrupt = [p.data for p in paused if p.event == "values"][-1]["__interrupt__"]

            first.kill()
            first.start()  # the same port: clients that knew the server find it again
            assert [line.startswith("API:") for line in first.stderr].count(True) == 2  # the new one is up
            sdk = get_client(url=first.url)
            thread = await sdk.threads.get(thread_id)
            assert thread["status"] == "interrupted" and list(thread["interrupts"].values()) == [interrupt]
            assert (await sdk.threads.get_state(thread_id))["tasks"][0]["interrupts"] == interrupt
            replay = await collect(sdk.runs.join_stream(thread_id, run_id, stream_mode=MODES, last_event_id="-1"))
            assert frames(replay) == frames(paused)

            second.start()
            other = get_client(url=second.url)
            shown = frames(paused)
            joined = await collect(
                other.runs.join_stream(thread_id, run_id, stream_mode=MODES, last_event_id=shown[2][1])
            )
            assert frames(joined) == shown[3:]
            offered = interrupt[0]["value"]["human_input_request"]["options"]
            blue = next(o["id"] for o in offered if o["label"] == "blue")
            resumed = await collect(
                other.runs.stream(thread_id, "hartflow", command={"resume": {"option_id": blue}}, stream_mode=MODES)
            )
            assert [p.data for p in resumed if p.event == "values"][-1]["messages"][-1]["content"] == "blue it is"
            assert (await sdk.threads.get(thread_id))["status"] == "idle"
            resumed_run = resumed[0].data["run_id"]
            on_first = await collect(
                sdk.runs.join_stream(thread_id, resumed_run, stream_mode=MODES, last_event_id="-1")
            )
            assert frames(on_first) == frames(resumed)


async def test_a_run_that_closes_while_its_stream_is_read_ends_from_its_archive(
    client: Client, ask_config: HartflowConfig
) -> None:
    """The reader saw the workflow open, but it closed before its last items were polled: the server's client
    refuses queries of closed runs (as ``hartflow serve``'s does), so the tail comes from the run archive."""
    serving = await connect(ask_config)
    async with running_worker(client, ask_config), serving_api(ask_config, serving) as url:
        sdk = get_client(url=url)
        thread_id = (await sdk.threads.create())["thread_id"]
        await sdk.runs.wait(thread_id, "hartflow", input=user("pick"))
        resumed = await sdk.runs.wait(thread_id, "hartflow", command={"resume": "blue"})
        run = (await sdk.runs.list(thread_id))[0]
        thread = ThreadRef(ask_config.user_id, thread_id)
        record = records.run_record(open_object_store(ask_config), thread, run["run_id"])
        assert record is not None
        stale = Chain(record.workflow_run_id, "running")  # as described a moment before it closed
        read = RunFrames(record, ["values"])
        parts = [f async for f in run_frames(serving, open_object_store(ask_config), thread, read, None, stale)]
        assert parts and read.outcome is not None and read.outcome["kind"] == "run_finished"
        assert parts[-1].data == resumed


async def test_a_held_run_keeps_its_connections_alive(
    worker: Client, api_config: HartflowConfig, release: Path
) -> None:
    """While a run is held, a stream carries heartbeat comments and a wait carries newlines before its JSON, so
    no proxy or client read timeout cuts them (no SDK call shows either: plain HTTP)."""
    async with serving_api(api_config, worker) as url, httpx.AsyncClient(base_url=url, timeout=60) as raw:
        thread_id = (await raw.post("/threads", json={})).json()["thread_id"]
        run = {"input": user("go"), "stream_mode": ["values"]}
        async with raw.stream("POST", f"/threads/{thread_id}/runs/stream", json=run) as stream:
            lines = stream.aiter_lines()
            async for line in lines:
                if line.startswith(":"):
                    break  # a heartbeat comment arrived while the run is held
        run_id = next(r["run_id"] for r in (await raw.get(f"/threads/{thread_id}/runs")).json())
        async with raw.stream("GET", f"/threads/{thread_id}/runs/{run_id}/join") as joined:
            chunks = joined.aiter_bytes()
            assert (await anext(chunks)).strip() == b""  # the run is still held: only keep-alive so far
            release.touch()
            body = b"".join([chunk async for chunk in chunks])
        assert json.loads(body)["messages"][-1]["content"] == "released"


async def test_a_failed_run_streams_an_error_and_leaves_the_thread_in_error(
    client: Client, home: Path, temporal_address: str, tmp_path: Path
) -> None:
    broken = make_config(home, temporal_address, model=write_script(tmp_path, []))  # the model has no answer
    async with running_worker(client, broken), serving_api(broken, await connect(broken)) as url:
        sdk = get_client(url=url)
        thread_id = (await sdk.threads.create())["thread_id"]
        parts = await collect(sdk.runs.stream(thread_id, "hartflow", input=user("hi"), stream_mode=MODES))
        assert [p.event for p in parts][-2:] == ["error", "end"]
        assert set(parts[-2].data) == {"error", "message"}
        assert (await sdk.runs.get(thread_id, parts[0].data["run_id"]))["status"] == "error"
        assert (await sdk.threads.get(thread_id))["status"] == "error"
        assert "__error__" in await sdk.runs.join(thread_id, parts[0].data["run_id"])
