"""``python -m bench.token_transport``: what live tokens cost a run's history, per transport (issue #28).

One model-call-shaped activity generates ``--tokens`` tokens evenly over ``--seconds`` inside a workflow that owns
a workflow stream, and publishes them three ways:

* ``none``: no live tokens (the baseline: the activity returns the complete answer);
* ``workflow_streams``: ``WorkflowStreamClient.from_within_activity`` with the given batch interval (each flush is
  a signal into the workflow: a history event, and a workflow task to apply it);
* ``side_channel``: hartflow's transport, token batches written to the thread's storage
  (``activities/live_tokens.py``) that the API replicas read (``workers/api/live_tokens.py``).

For each it prints the workflow's history events and JSON bytes after one turn, and the batches published.
Defaults: a 2,000-token answer over 20 s, flushes every 100 ms (workflow streams' own default is 2 s, too slow
for live text).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from langchain_core.messages import AIMessageChunk
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamClient
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.live_tokens import TokenBatcher
from activities.storage.filesystem import FilesystemObjectStore
from vocabulary.contracts import LiveTokens
from workers.testing.temporal import dev_server


@dataclass
class Generation:
    transport: str
    tokens: int
    seconds: float
    flush_seconds: float
    home: str


@activity.defn(name="bench.generate")
async def generate(spec: Generation) -> dict[str, int | str]:
    """Emit ``tokens`` tokens over ``seconds`` through ``transport``; the answer and the batches published."""
    pause = spec.seconds / spec.tokens
    published = 0
    text: list[str] = []
    if spec.transport == "workflow_streams":
        stream = WorkflowStreamClient.from_within_activity(batch_interval=timedelta(seconds=spec.flush_seconds))
        topic = stream.topic("tokens", type=str)
        async with stream:
            for index in range(spec.tokens):
                text.append(f"tok{index} ")
                topic.publish(text[-1])
                await asyncio.sleep(pause)
        published = -1  # counted from history: one signal per flush
    elif spec.transport == "side_channel":
        store = FilesystemObjectStore(Path(spec.home))
        info = activity.info()
        batcher = TokenBatcher(
            store, LiveTokens(f"bench/{info.workflow_id}", 0), info.attempt, "bench-message", spec.flush_seconds
        )
        ticking = asyncio.create_task(batcher.tick())
        for index in range(spec.tokens):
            text.append(f"tok{index} ")
            if batcher.add(AIMessageChunk(content=text[-1])):
                await batcher.flush()
            await asyncio.sleep(pause)
        ticking.cancel()
        await batcher.flush()
        published = batcher.batches
    else:
        for index in range(spec.tokens):
            text.append(f"tok{index} ")
            await asyncio.sleep(pause)
    return {"answer": "".join(text), "batches": published}


@workflow.defn(name="bench.TokenTurn")
class TokenTurn:
    @workflow.init
    def __init__(self, spec: Generation) -> None:
        self.stream = WorkflowStream()

    @workflow.run
    async def run(self, spec: Generation) -> dict[str, int | str]:
        result: dict[str, int | str] = await workflow.execute_activity(
            generate, spec, start_to_close_timeout=timedelta(seconds=spec.seconds * 4 + 60)
        )
        self.stream.detach_pollers()
        return result


async def measure(client: Client, spec: Generation) -> dict[str, object]:
    queue = f"bench-tokens-{uuid.uuid4()}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[TokenTurn],
        activities=[generate],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await client.start_workflow(TokenTurn.run, spec, id=f"bench-tokens-{uuid.uuid4()}", task_queue=queue)
        result = await handle.result()
        history = await handle.fetch_history()
    signals = sum(1 for event in history.events if event.HasField("workflow_execution_signaled_event_attributes"))
    return {
        "transport": spec.transport,
        "events": len(history.events),
        "history_bytes": len(history.to_json().encode()),
        "signals": signals,
        "batches": signals if result["batches"] == -1 else result["batches"],
    }


async def main(tokens: int, seconds: float, flush_seconds: float) -> None:
    with dev_server() as server, tempfile.TemporaryDirectory() as home:
        client = await Client.connect(server.address)
        rows = []
        for transport in ("none", "workflow_streams", "side_channel"):
            rows.append(await measure(client, Generation(transport, tokens, seconds, flush_seconds, home)))
    print(f"{tokens} tokens over {seconds:g} s, flush every {flush_seconds * 1000:g} ms")
    print("| transport | history events | history bytes | signals | batches |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['transport']} | {row['events']} | {row['history_bytes']} | {row['signals']} | {row['batches']} |"
        )
    print(json.dumps(rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--flush-ms", type=float, default=100.0)
    args = parser.parse_args()
    asyncio.run(main(args.tokens, args.seconds, args.flush_ms / 1000))
