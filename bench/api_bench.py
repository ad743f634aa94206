"""``python -m bench.api_bench``: ``hartflow serve`` against ``langgraph dev`` on the same scripted workload.

    python -m bench.api_bench                    # 30 sequential runs, then 100 concurrent streams, per server
    python -m bench.api_bench --smoke            # 2 sequential, 5 concurrent: does it work at all
    python -m bench.api_bench --update-readme    # also rewrite README.md's <!-- bench-api:begin --> block
    python -m bench.api_bench --trace --only "hartflow serve"   # one run's frames: arrival time, event latency

Every run goes through the official ``langgraph-sdk`` client: ``threads.create``, then ``runs.stream`` with
DeerFlow's stream modes, then (the run finished) ``runs.join``. The workload is ``bench.workload``'s N turns of
one ``ls`` call, then the final answer: a scripted model on hartflow, the same responses from a graph node on
the peer (``bench/api_peer_graph.py``). Measured, per server:

* first event: ``runs.stream`` called → its first SSE frame arrives (``metadata``);
* event latency: a ``custom`` event's own timestamp (hartflow: the workflow task that published it; the peer:
  the node when it wrote it) → the client holds it (one machine, one clock);
* join: ``runs.join`` of a run that has finished;
* throughput: C streaming runs started at once on the one API process, until the last stream ended.

A run whose stream does not end with the final answer fails the benchmark (no number comes from a broken run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.schema import StreamMode

from bench.api_peer_graph import TURNS
from bench.api_servers import HARTFLOW_ASSISTANT, PEER_GRAPH, hartflow_api, langgraph_dev
from bench.common import median, percentile, round_ms
from bench.workload import FINAL_ANSWER, PROMPT

MODES: list[StreamMode] = ["values", "messages-tuple", "updates", "custom"]
INPUT: dict[str, Any] = {"messages": [{"role": "user", "content": PROMPT}]}
REPO = Path(__file__).resolve().parents[1]
README_BEGIN, README_END = "<!-- bench-api:begin -->", "<!-- bench-api:end -->"


@dataclass
class Sample:
    first_event: float
    event_latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0
    join: float | None = None


def client_for(url: str) -> LangGraphClient:
    """The SDK's client, with a connection pool as large as the benchmark's concurrency needs."""
    return LangGraphClient(
        httpx.AsyncClient(
            base_url=url,
            transport=httpx.AsyncHTTPTransport(retries=5),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
            timeout=httpx.Timeout(connect=30, read=300, write=300, pool=30),
        )
    )


async def one_run(client: LangGraphClient, assistant: str, thread_id: str, *, join: bool) -> Sample:
    began = time.perf_counter()
    sample: Sample | None = None
    run_id, last_values = "", {}
    async for part in client.runs.stream(thread_id, assistant, input=INPUT, stream_mode=MODES):
        held, wall = time.perf_counter(), datetime.now(UTC)
        if sample is None:
            sample = Sample(first_event=held - began)
        if part.event == "metadata":
            run_id = part.data["run_id"]
        elif part.event == "values":
            last_values = part.data
        elif part.event == "custom" and isinstance(part.data, dict) and "at" in part.data:
            sample.event_latencies.append((wall - datetime.fromisoformat(part.data["at"])).total_seconds())
    if sample is None or not run_id:
        raise RuntimeError(f"{assistant}: the stream of thread {thread_id} sent nothing")
    sample.seconds = time.perf_counter() - began
    final = (last_values.get("messages") or [{}])[-1]
    if final.get("content") != FINAL_ANSWER:
        raise RuntimeError(f"{assistant}: thread {thread_id} did not end with the final answer: {final}")
    if join:
        joined_at = time.perf_counter()
        await client.runs.join(thread_id, run_id)
        sample.join = time.perf_counter() - joined_at
    return sample


async def new_threads(client: LangGraphClient, count: int) -> list[str]:
    return [(await client.threads.create())["thread_id"] for _ in range(count)]


def stats(values: list[float]) -> dict[str, float]:
    return {"p50_ms": round_ms(median(values)), "p99_ms": round_ms(percentile(values, 99)), "n": len(values)}


async def measure(url: str, assistant: str, sequential: int, concurrent: int) -> dict[str, Any]:
    client = client_for(url)
    try:
        await one_run(client, assistant, (await new_threads(client, 1))[0], join=True)  # warm-up, not counted
        samples = [
            await one_run(client, assistant, thread, join=True) for thread in await new_threads(client, sequential)
        ]
        threads = await new_threads(client, concurrent)
        began = time.perf_counter()
        burst = await asyncio.gather(*(one_run(client, assistant, thread, join=False) for thread in threads))
        wall = time.perf_counter() - began
    finally:
        await client.aclose()
    return {
        "first_event": stats([s.first_event for s in samples]),
        "event_latency": stats([latency for s in samples for latency in s.event_latencies]),
        "join_finished": stats([s.join for s in samples if s.join is not None]),
        "run_seconds": stats([s.seconds for s in samples]),
        "concurrent": {
            "runs": concurrent,
            "wall_seconds": round(wall, 2),
            "runs_per_minute": round(concurrent / wall * 60, 1),
            "first_event": stats([s.first_event for s in burst]),
            "event_latency": stats([latency for s in burst for latency in s.event_latencies]),
        },
    }


async def trace(url: str, assistant: str) -> None:
    """Print one run's frames as they arrive: seconds since ``runs.stream``, event, and for a ``custom`` event its
    kind and latency (where a server holds events back, they arrive together)."""
    client = client_for(url)
    try:
        thread_id = (await client.threads.create())["thread_id"]
        began = time.perf_counter()
        async for part in client.runs.stream(thread_id, assistant, input=INPUT, stream_mode=MODES):
            line = f"{time.perf_counter() - began:8.3f} s  {part.event}"
            if part.event == "custom" and isinstance(part.data, dict) and "at" in part.data:
                held = (datetime.now(UTC) - datetime.fromisoformat(part.data["at"])).total_seconds()
                line += f"  {part.data.get('kind')}  {round_ms(held)} ms"
            print(line, flush=True)
    finally:
        await client.aclose()


def servers(workdir: Path, concurrent: int) -> dict[str, tuple[Callable[[], AbstractContextManager[str]], str]]:
    return {
        "hartflow serve": (lambda: hartflow_api(workdir / "hartflow"), HARTFLOW_ASSISTANT),
        "langgraph dev": (lambda: langgraph_dev(workdir / "peer", jobs=concurrent), PEER_GRAPH),
    }


async def run(sequential: int, concurrent: int, only: list[str] | None, *, tracing: bool = False) -> dict[str, Any]:
    results: dict[str, Any] = {
        "turns": TURNS,
        "sequential_runs": sequential,
        "concurrent_runs": concurrent,
        "stream_modes": MODES,
        "systems": {},
    }
    with tempfile.TemporaryDirectory(prefix="hartflow-bench-api-") as tmp:
        workdir = Path(tmp)
        for name, (start, assistant) in servers(workdir, concurrent).items():
            if only and name not in only:
                continue
            print(f"bench.api: {name} …", file=sys.stderr, flush=True)
            with start() as url:
                if tracing:
                    await trace(url, assistant)
                else:
                    results["systems"][name] = await measure(url, assistant, sequential, concurrent)
    return results


def _rows(results: dict[str, Any]) -> Iterator[str]:
    yield (
        "| server | first event p50 / p99 | event latency p50 / p99 | join (finished) p50 / p99 | "
        f"{results['concurrent_runs']} concurrent streams | first event under load p50 / p99 |"
    )
    yield "|---|---|---|---|---|---|"
    for name, r in results["systems"].items():
        burst = r["concurrent"]
        yield (
            f"| {name} | {r['first_event']['p50_ms']} / {r['first_event']['p99_ms']} ms "
            f"| {r['event_latency']['p50_ms']} / {r['event_latency']['p99_ms']} ms "
            f"| {r['join_finished']['p50_ms']} / {r['join_finished']['p99_ms']} ms "
            f"| {burst['runs_per_minute']} runs/min ({burst['wall_seconds']} s) "
            f"| {burst['first_event']['p50_ms']} / {burst['first_event']['p99_ms']} ms |"
        )


def markdown(results: dict[str, Any], command: str) -> str:
    header = (
        f"`{command}` — {results['turns']} tool turns per run, {results['sequential_runs']} sequential runs "
        f"per server (after one warm-up), stream modes {', '.join(results['stream_modes'])}:"
    )
    return "\n".join([header, "", *_rows(results)])


def update_readme(path: Path, table: str) -> None:
    text = path.read_text(encoding="utf-8")
    start, end = text.index(README_BEGIN) + len(README_BEGIN), text.index(README_END)
    path.write_text(text[:start] + "\n" + table + "\n" + text[end:], encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.api_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="2 sequential runs, 5 concurrent")
    parser.add_argument("--sequential", type=int, help="timed sequential runs per server (default 30)")
    parser.add_argument("--concurrent", type=int, help="streaming runs started at once (default 100)")
    parser.add_argument("--only", help="comma-separated: 'hartflow serve', 'langgraph dev'")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "api.json")
    parser.add_argument("--update-readme", action="store_true")
    parser.add_argument("--trace", action="store_true", help="print one run's frames per server, measure nothing")
    args = parser.parse_args(argv)
    sequential = args.sequential or (2 if args.smoke else 30)
    concurrent = args.concurrent or (5 if args.smoke else 100)
    only = args.only.split(",") if args.only else None
    if args.trace:
        asyncio.run(run(sequential, concurrent, only, tracing=True))
        return 0
    results = asyncio.run(run(sequential, concurrent, only))
    command = "python -m bench.api_bench " + " ".join(argv if argv is not None else sys.argv[1:])
    table = markdown(results, command.strip())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(table)
    if args.update_readme:
        update_readme(REPO / "README.md", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
