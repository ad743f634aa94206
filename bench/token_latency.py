"""``python -m bench.token_latency``: how long a token takes from the provider to a ``langgraph-sdk`` client.

    python -m bench.token_latency                 # 20 runs per setup
    python -m bench.token_latency --runs 3        # a quick look
    python -m bench.token_latency --only "hartflow serve, 2 replicas"

The provider is ``bench/timed_provider.py`` (OpenAI-compatible, 40 pieces 50 ms apart, each stamped with the time
it was sent). Measured per setup, on one machine and one clock: *first chunk*, the provider's first piece → the
client holds the first ``AIMessageChunk`` frame; *any chunk*, for every frame, its earliest piece → the client
holds it. Setups:

* ``hartflow serve``: one API replica and one ``hartflow worker`` on a dev server; the client streams the run
  (``runs.stream``, modes ``values`` and ``messages-tuple``);
* ``hartflow serve, 2 replicas``: the run is created on one replica and streamed from the other
  (``runs.create``, then ``runs.join_stream``): the reader replica never saw the run start;
* ``langgraph dev``: the peer, a one-node graph calling the same provider through ``ChatOpenAI``
  (``bench/token_peer_graph.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph_sdk.client import LangGraphClient

from bench import hartflow_side
from bench.api_bench import client_for, stats
from bench.api_servers import HARTFLOW_ASSISTANT, PEER_GRAPH, langgraph_dev
from bench.timed_provider import PIECE_SECONDS, PIECES, sent_times, timed_provider
from workers.devserver import DevServer, free_port
from workers.devserver_options import DevServerOptions
from workers.testing.api_server import ApiServer

REPO = Path(__file__).resolve().parents[1]
INPUT: dict[str, Any] = {"messages": [{"role": "user", "content": "Stream me something"}]}
MODES: list[Any] = ["values", "messages-tuple"]
SETUPS = ("hartflow serve", "hartflow serve, 2 replicas", "langgraph dev")


@dataclass
class Sample:
    first: float | None = None
    every: list[float] = field(default_factory=list)
    pieces: int = 0


def _take(sample: Sample, part: Any) -> None:
    held = time.time()
    if part.event != "messages" or not isinstance(part.data, list) or not part.data:
        return
    chunk = part.data[0]
    if not isinstance(chunk, dict) or chunk.get("type") != "AIMessageChunk":
        return
    sent = sent_times(str(chunk.get("content") or ""))
    if not sent:
        return
    sample.pieces += len(sent)
    sample.every.append(held - sent[0])
    if sample.first is None:
        sample.first = held - sent[0]


async def one_run(starter: LangGraphClient, reader: LangGraphClient, assistant: str, *, join: bool) -> Sample:
    sample = Sample()
    thread_id = (await starter.threads.create())["thread_id"]
    if join:
        run = await starter.runs.create(thread_id, assistant, input=INPUT, stream_mode=MODES)
        parts = reader.runs.join_stream(thread_id, run["run_id"], stream_mode=MODES)
    else:
        parts = reader.runs.stream(thread_id, assistant, input=INPUT, stream_mode=MODES)
    async for part in parts:
        _take(sample, part)
    if sample.first is None or sample.pieces != PIECES:
        raise RuntimeError(f"{assistant}: thread {thread_id} streamed {sample.pieces} of {PIECES} pieces")
    return sample


async def measure(urls: list[str], assistant: str, runs: int) -> dict[str, Any]:
    starter, reader = client_for(urls[0]), client_for(urls[-1])
    join = len(urls) > 1
    try:
        await one_run(starter, reader, assistant, join=join)  # warm-up, not counted
        samples = [await one_run(starter, reader, assistant, join=join) for _ in range(runs)]
    finally:
        await starter.aclose()
        await reader.aclose()
    return {
        "first_chunk": stats([s.first for s in samples if s.first is not None]),
        "any_chunk": stats([latency for s in samples for latency in s.every]),
        "frames_per_answer": round(sum(len(s.every) for s in samples) / len(samples), 1),
    }


@contextlib.contextmanager
def hartflow_apis(workdir: Path, provider: str, replicas: int) -> Iterator[list[str]]:
    """``replicas`` ``hartflow serve`` processes and one ``hartflow worker`` on a fresh dev server, the model a
    ``models:`` entry on the timed provider."""
    workdir.mkdir(parents=True)
    server = DevServer(DevServerOptions(db_file=workdir / "temporal.db", port=free_port(), ui=False))
    server.start()
    try:
        entry = {
            "name": "timed",
            "use": "langchain_openai:ChatOpenAI",
            "model": "bench-timed",
            "api_key": "bench",
            "base_url": provider,
        }
        config = hartflow_side.bench_config(workdir / "home", server.address, "bench-tokens", turns=1, models=[entry])
        config = config.model_copy(update={"model": "timed"})
        with hartflow_side.worker_processes(config, workdir / "worker.yaml"):
            serve = hartflow_side.write_worker_config(config, workdir / "serve.yaml")
            apis = [ApiServer(serve).start() for _ in range(replicas)]
            try:
                yield [api.url for api in apis]
            finally:
                for api in apis:
                    api.stop()
    finally:
        server.stop()


async def run(runs: int, only: list[str] | None) -> dict[str, Any]:
    results: dict[str, Any] = {"runs": runs, "pieces": PIECES, "piece_ms": PIECE_SECONDS * 1000, "systems": {}}
    with tempfile.TemporaryDirectory(prefix="hartflow-bench-tokens-") as tmp, timed_provider() as provider:
        workdir = Path(tmp)
        for name in SETUPS:
            if only and name not in only:
                continue
            print(f"bench.token_latency: {name} …", file=sys.stderr, flush=True)
            if name == "langgraph dev":
                graph = REPO / "bench" / "token_peer_graph.py"
                with langgraph_dev(workdir / "peer", jobs=1, graph=graph, HARTFLOW_BENCH_PROVIDER=provider) as url:
                    results["systems"][name] = await measure([url], PEER_GRAPH, runs)
            else:
                replicas = 2 if "2 replicas" in name else 1
                with hartflow_apis(workdir / f"hartflow-{replicas}", provider, replicas) as urls:
                    results["systems"][name] = await measure(urls, HARTFLOW_ASSISTANT, runs)
    return results


def markdown(results: dict[str, Any], command: str) -> str:
    lines = [
        f"`{command}` — {results['runs']} runs per setup (after one warm-up), {results['pieces']} pieces "
        f"{results['piece_ms']:.0f} ms apart:",
        "",
        "| setup | provider's first piece → first chunk at the client, p50 / p99 | any piece → client, p50 / p99 "
        "| chunk frames per answer |",
        "|---|---|---|---|",
    ]
    for name, r in results["systems"].items():
        lines.append(
            f"| {name} | {r['first_chunk']['p50_ms']} / {r['first_chunk']['p99_ms']} ms "
            f"| {r['any_chunk']['p50_ms']} / {r['any_chunk']['p99_ms']} ms | {r['frames_per_answer']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.token_latency", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="timed runs per setup")
    parser.add_argument("--only", help=f"comma-separated subset of: {'; '.join(SETUPS)}", type=str)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "token_latency.json")
    args = parser.parse_args(argv)
    only = [name.strip() for name in args.only.split(";")] if args.only else None
    results = asyncio.run(run(args.runs, only))
    command = "python -m bench.token_latency " + " ".join(argv if argv is not None else sys.argv[1:])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(markdown(results, command.strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
