"""History size per turn: what one agent turn adds to Temporal history, and to storage, at turn N.

    .venv/bin/python -m bench.history_size [--turns 10 500] [--address HOST:PORT]
    .venv/bin/python -m bench.history_size --turns 10 --answer-tokens 2000   # live tokens on, then off

Runs one scripted run of ``max(turns) + 2`` turns (one ``ls`` tool call per turn, LoopDetection off) on a dev
server it starts (or ``--address``), then reads the whole continue-as-new chain back and prints, for each
requested turn: the history events and bytes the turn added (from its model call to the next one), the bytes it
moved through the claim check, the blob bytes it wrote (new message bodies, a new preamble, and the request's
manifest: a delta, or the full list every ``FULL_MANIFEST_EVERY`` requests),
and — for comparison — how big the request's message list would have been inline.

With ``--answer-tokens N`` every turn's model response also streams N tokens of text (scripted ``chunks``), and
the run is measured twice: live tokens on and off (``run.model_call.stream_tokens``).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench.hartflow_side import start_run
from vocabulary.contracts import MODEL_INVOKE, ModelCallInput
from vocabulary.transcript import FULL_MANIFEST_EVERY, delta_text, manifest_text
from workers.devserver import DevServer, free_port
from workers.devserver_options import DevServerOptions
from workers.payloads import client_for
from workers.testing import calls, make_config, running_worker, tool_call, unique, write_script
from workers.testing.history import chain_histories, model_turn, turn_costs


async def _transcript_sizes(client: Client, runs: list[list[Any]]) -> dict[int, tuple[int, int]]:
    """Per agent turn: (blob bytes the model call wrote, bytes its message list would have been inline)."""
    body_sizes: dict[str, int] = {}
    sizes: dict[int, tuple[int, int]] = {}
    ids: list[str] = []
    turn = 0
    for events in runs:
        for event in events:
            if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                continue
            attributes = event.activity_task_scheduled_event_attributes
            if attributes.activity_type.name != MODEL_INVOKE:
                continue
            [call] = await client.data_converter.decode(list(attributes.input.payloads), [ModelCallInput])
            ref = call.transcript
            if ref is None or call.purpose != "agent":
                continue
            turn += 1
            # Each agent request builds on the previous one (``base``), so the id list can be followed along.
            ids = [*ids[: ref.keep], *ref.append]
            body_sizes.update({key: len(body.encode()) for key, body in ref.bodies.items()})
            if ref.depth and ref.base is not None:
                manifest = delta_text(ref.base, ref.keep, ref.base_depth, ref.append)
            else:
                manifest = manifest_text(ids)
            bodies = [*ref.bodies.values(), *([ref.preamble_body] if ref.preamble_body is not None else [])]
            written = sum(len(body.encode()) for body in bodies) + len(manifest.encode())
            sizes[turn] = (written, sum(body_sizes[key] for key in ids))
    return sizes


def _print_event_bytes(runs: list[list[Any]], costs: dict[int, Any], turns: list[int]) -> None:
    """What each kind of event adds to one turn's history (the window ``turn_costs`` measures)."""
    for wanted in turns:
        turn = min(t for t in costs if t >= wanted)
        for events in runs:
            starts = [i for i, event in enumerate(events) if model_turn(event) in (turn, turn + 1)]
            if len(starts) == 2:
                sizes: Counter[str] = Counter()
                for event in events[starts[0] : starts[1]]:
                    sizes[EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")] += event.ByteSize()
                print(f"turn {turn}: " + ", ".join(f"{name} {size}" for name, size in sizes.most_common()))


async def measure(
    address: str,
    turns: list[int],
    workdir: Path,
    by_event: bool = False,
    answer_tokens: int = 0,
    stream_tokens: bool = True,
) -> list[dict[str, Any]]:
    total = max(turns) + 2
    run = {
        "recursion_limit": total + 10,
        "middlewares": {"loop_detection": {"enabled": False}},
        "model_call": {"stream_tokens": stream_tokens},
    }
    config = make_config(workdir / "home", address, run=run)
    turn = calls(tool_call("ls", path="/mnt/user-data"))
    if answer_tokens:  # the text comes as the pieces a streaming provider sends (content is their concatenation)
        turn = {**{k: v for k, v in turn.items() if k != "content"}, "chunks": [f"w{i} " for i in range(answer_tokens)]}
    script = [turn for _ in range(total - 1)]
    model = write_script(workdir, [*script, {"content": "done", "response_metadata": {"finish_reason": "stop"}}])
    client = client_for(await Client.connect(address), config)
    started = time.monotonic()
    async with running_worker(client, config):
        handle = await start_run(client, config, unique("thread"), model, "go")
        await handle.result()
    seconds = time.monotonic() - started
    runs = await chain_histories(client, handle.id, handle.first_execution_run_id or "")
    costs = {cost.turn: cost for cost in turn_costs(runs)}
    blobs = await _transcript_sizes(client, runs)
    if by_event:
        _print_event_bytes(runs, costs, turns)
    rows = []
    for wanted in turns:
        turn = min(t for t in costs if t >= wanted)  # the first and last turn of each run are not measured
        cost = costs[turn]
        rows.append(
            {
                "streaming": "on" if stream_tokens else "off",
                "turn": turn,
                "history_events": cost.events,
                "history_bytes": cost.bytes,
                "claim_check_bytes": cost.external_bytes,
                "blob_bytes_written": blobs[turn][0],
                # A full manifest every FULL_MANIFEST_EVERY requests, deltas between: the average over that window.
                "blob_bytes_avg_32": round(
                    sum(blobs[t][0] for t in range(turn - FULL_MANIFEST_EVERY + 1, turn + 1) if t in blobs)
                    / max(1, sum(1 for t in range(turn - FULL_MANIFEST_EVERY + 1, turn + 1) if t in blobs))
                ),
                "inline_list_bytes": blobs[turn][1],
                "runs_in_chain": len(runs),
                "run_seconds": round(seconds, 1),
            }
        )
    return rows


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, nargs="+", default=[10, 500])
    parser.add_argument("--address", help="an existing Temporal frontend; default: start a dev server")
    parser.add_argument("--by-event", action="store_true", help="also print each turn's bytes by event type")
    parser.add_argument("--answer-tokens", type=int, default=0, help="streamed text per answer; measures on and off")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hartflow-history-size-") as tmp:
        server = None if args.address else DevServer(DevServerOptions(port=free_port(), ui=False))
        if server is not None:
            await asyncio.to_thread(server.start)
        try:
            address = args.address or server.address  # type: ignore[union-attr]
            rows = []
            for streaming in (True, False) if args.answer_tokens else (True,):
                workdir = Path(tmp) / ("on" if streaming else "off")
                workdir.mkdir()
                rows += await measure(
                    address, sorted(args.turns), workdir, args.by_event, args.answer_tokens, streaming
                )
        finally:
            if server is not None:
                server.stop()
    header = list(rows[0])
    print(" ".join(f"{name:>18}" for name in header))
    for row in rows:
        print(" ".join(f"{row[name]:>18}" for name in header))


if __name__ == "__main__":
    asyncio.run(main())
