"""Live tokens (issue #28) through the official ``langgraph-sdk`` client: a streamed answer arrives as
``AIMessageChunk`` frames under the final message's id before the final message; a reconnect mid-answer on
another API replica continues without gaps or repeats; a worker SIGKILLed mid-stream leaves the client a void
frame (``remove`` under the same id) and the final state holds the answer once; storage going away mid-answer
delays the tokens and never ends the stream.

DeerFlow's app reads these frames with ``useStream`` (``frontend/src/core/threads/hooks.ts``: ``streamMode``
includes ``messages-tuple``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from temporalio.client import Client

from workers.config import HartflowConfig
from workers.testing import make_config, running_worker, serving_api, write_script
from workers.testing.processes import kill_hard, worker_process
from workers.testing.s3 import S3Server, s3_storage_settings
from workers.worker import connect

MODES = ["values", "messages-tuple"]
WORDS = [f"word{index} " for index in range(40)]


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def streamed(text_chunks: list[str], delay: float) -> dict[str, Any]:
    return {"chunks": text_chunks, "chunk_delay": delay, "response_metadata": {"finish_reason": "stop"}}


def chunk_frames(parts: list[Any]) -> list[dict[str, Any]]:
    return [p.data[0] for p in parts if p.event == "messages" and p.data[0]["type"] == "AIMessageChunk"]


def final_values(parts: list[Any]) -> dict[str, Any]:
    return [p.data for p in parts if p.event == "values"][-1]


async def read_until(parts: AsyncIterator[Any], chunks: int) -> list[Any]:
    """Read until ``chunks`` chunk frames arrived, then drop the connection."""
    seen: list[Any] = []
    async for part in parts:
        seen.append(part)
        if len(chunk_frames(seen)) >= chunks:
            break
    await parts.aclose()  # type: ignore[attr-defined]
    return seen


@pytest.fixture
def config(home: Path, temporal_address: str, tmp_path: Path) -> HartflowConfig:
    return make_config(home, temporal_address, model=write_script(tmp_path, [streamed(WORDS, 0.05)]))


async def test_a_streamed_answer_arrives_in_chunks_and_a_reconnect_on_another_replica_continues(
    client: Client, config: HartflowConfig
) -> None:
    async with running_worker(client, config):
        api_client = await connect(config)
        async with serving_api(config, api_client) as url, serving_api(config, api_client) as other_url:
            sdk = get_client(url=url)
            thread_id = (await sdk.threads.create())["thread_id"]
            whole = [part async for part in sdk.runs.stream(thread_id, "hartflow", input=user("go"), stream_mode=MODES)]
            answer = final_values(whole)["messages"][-1]
            assert answer["content"] == "".join(WORDS)
            chunks = chunk_frames(whole)
            first_final = next(
                i for i, p in enumerate(whole) if p.event == "values" and p.data["messages"][-1]["type"] == "ai"
            )
            assert len(chunk_frames(whole[:first_final])) >= 10, "chunks arrive before the final message"
            assert {chunk["id"] for chunk in chunks} == {answer["id"]}
            assert "".join(chunk["content"] for chunk in chunks) == answer["content"]
            assert not [p for p in whole if p.event == "messages" and p.data[0]["type"] == "ai"], "no second copy"

            # The next turn, dropped mid-answer and joined on the other replica from the last event it saw.
            second = await read_until(
                sdk.runs.stream(thread_id, "hartflow", input=user("again"), stream_mode=MODES), chunks=3
            )
            run_id = second[0].data["run_id"]
            rest = [
                part
                async for part in get_client(url=other_url).runs.join_stream(
                    thread_id, run_id, stream_mode=MODES, last_event_id=second[-1].id
                )
            ]
            texts = [chunk["content"] for chunk in chunk_frames(second) + chunk_frames(rest)]
            assert "".join(texts) == "".join(WORDS), "no gap, no repeat"
            assert final_values(rest)["messages"][-1]["content"] == "".join(WORDS)


@pytest.fixture
def kill_config(home: Path, temporal_address: str, tmp_path: Path) -> HartflowConfig:
    model = write_script(tmp_path, [streamed(WORDS, 0.25)])
    return make_config(home, temporal_address, model=model, run={"model_call": {"heartbeat_seconds": 2}})


async def test_a_worker_killed_mid_stream_voids_the_partial_text_and_the_answer_is_kept_once(
    client: Client, kill_config: HartflowConfig, tmp_path: Path
) -> None:
    api_client = await connect(kill_config)
    async with serving_api(kill_config, api_client) as url:
        sdk = get_client(url=url)
        thread_id = (await sdk.threads.create())["thread_id"]
        with worker_process(kill_config, tmp_path / "doomed.yaml") as doomed:
            parts = sdk.runs.stream(thread_id, "hartflow", input=user("go"), stream_mode=MODES)
            seen = await read_until(parts, chunks=3)
            run_id = seen[0].data["run_id"]
            async with running_worker(client, kill_config):
                kill_hard(doomed)
                seen += [
                    part
                    async for part in sdk.runs.join_stream(
                        thread_id, run_id, stream_mode=MODES, last_event_id=seen[-1].id
                    )
                ]
        answer = final_values(seen)["messages"][-1]
        voids = [p for p in seen if p.event == "messages" and p.data[0]["type"] == "remove"]
        assert [void.data[0]["id"] for void in voids] == [answer["id"]]
        after_void = seen[seen.index(voids[0]) :]
        assert "".join(chunk["content"] for chunk in chunk_frames(after_void)) == "".join(WORDS)
        state = await sdk.threads.get_state(thread_id)
        ai = [m for m in state["values"]["messages"] if m["type"] == "ai"]
        assert [m["content"] for m in ai] == ["".join(WORDS)]


async def test_storage_down_mid_answer_delays_the_tokens_and_the_stream_goes_on(
    client: Client, home: Path, temporal_address: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by bench/soak: an S3 outage while a client streamed an answer ended the stream with a
    ``ServiceUnavailable`` error frame at once (the token read raised), and the SDK took it as the run's end."""
    s3 = S3Server(tmp_path / "s3")
    s3.start()
    try:
        storage = s3_storage_settings(s3, s3.create_bucket("tokens-down"))
        model = write_script(tmp_path, [streamed(WORDS, 0.1)])
        config = make_config(home, temporal_address, storage=storage, model=model)
        async with running_worker(client, config):
            api_client = await connect(config)
            async with serving_api(config, api_client) as url:
                sdk = get_client(url=url)
                thread_id = (await sdk.threads.create())["thread_id"]
                seen: list[Any] = []
                chunks_arrived = asyncio.Event()

                async def consume() -> None:
                    async for part in sdk.runs.stream(thread_id, "hartflow", input=user("go"), stream_mode=MODES):
                        seen.append(part)
                        if len(chunk_frames(seen)) >= 3:
                            chunks_arrived.set()

                consumer = asyncio.ensure_future(consume())
                await asyncio.wait(
                    {consumer, asyncio.ensure_future(chunks_arrived.wait())}, return_when="FIRST_COMPLETED"
                )
                assert chunks_arrived.is_set(), "the answer streamed"
                with caplog.at_level(logging.WARNING, logger="hartflow.live_tokens"):
                    async with s3.down():
                        while not consumer.done() and not any(
                            "storage unavailable while reading live tokens" in r.getMessage() for r in caplog.records
                        ):
                            await asyncio.sleep(0.05)
                        assert not consumer.done(), "the stream ended while storage was down"
                await consumer
    finally:
        s3.stop()
    assert not [p for p in seen if p.event == "error"]
    assert final_values(seen)["messages"][-1]["content"] == "".join(WORDS)
