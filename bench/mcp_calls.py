"""The cost of MCP tools through hartflow: one tool call, and discovery per run.

    .venv/bin/python -m bench.mcp_calls [--calls 20] [--runs 3] [--direct 200] [--address HOST:PORT]

* **call**: runs of ``--calls`` turns, each calling ``mcp-server-time``'s ``get_current_time`` through a pooled
  stdio session (one process for every call on the worker); a call's cost is its ``mcp.call_tool`` activity from
  scheduled to completed (the server's event times), so it includes the task-queue dispatch and the result's
  trip back to history. The floor is the same server called in a loop with the ``mcp`` client on one session.
* **discovery**: ``--runs`` runs with 1 and with 5 servers configured (five ``mcp-server-time`` processes with
  different arguments, so five pooled sessions), ``mcp.list_tools`` from scheduled to completed. The first run
  on a fresh worker starts the servers (cold); later runs reuse their sessions (warm).

Prints a markdown table (milliseconds) for the README.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench.common import percentile
from bench.hartflow_side import start_run
from workers.devserver import DevServer, free_port
from workers.devserver_options import DevServerOptions
from workers.payloads import client_for
from workers.testing import answer, calls, make_config, running_worker, tool_call, unique, write_script
from workers.testing.history import history_events
from workers.testing.mcp import time_server

_ZONES = ["UTC", *(f"Etc/GMT+{h}" for h in range(1, 13)), *(f"Etc/GMT-{h}" for h in range(1, 13))]


def _activity_ms(events: list[Any], activity: str) -> list[float]:
    """Scheduled → completed of every ``activity`` in one history, in milliseconds."""
    scheduled: dict[int, float] = {}
    durations = []
    for event in events:
        when = event.event_time.ToDatetime().timestamp()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == activity:
                scheduled[event.event_id] = when
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            started = scheduled.get(event.activity_task_completed_event_attributes.scheduled_event_id)
            if started is not None:
                durations.append((when - started) * 1000)
    return durations


async def _runs(
    client: Client, address: str, workdir: Path, servers: dict[str, Any], runs: int, turns: int
) -> list[list[Any]]:
    run = {"recursion_limit": turns + 5, "middlewares": {"loop_detection": {"enabled": False}}}
    config = make_config(workdir / f"home-{len(servers)}", address, run=run, mcp={"servers": servers})
    script = [calls(tool_call("s0_get_current_time", timezone=_ZONES[n % len(_ZONES)])) for n in range(turns)]
    model = write_script(workdir, [*script, answer("done")])
    histories = []
    async with running_worker(client, config):  # one worker, so one session pool, for all the runs
        for _ in range(runs):
            handle = await start_run(client_for(client, config), config, unique("thread"), model, "what time is it?")
            await handle.result()
            histories.append(await history_events(handle))
    return histories


async def _direct(count: int) -> list[float]:
    server = time_server()
    params = StdioServerParameters(command=server["command"], args=server["args"])
    durations = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for n in range(count):
            started = time.perf_counter()
            await session.call_tool("get_current_time", {"timezone": _ZONES[n % len(_ZONES)]})
            durations.append((time.perf_counter() - started) * 1000)
    return durations


def _row(name: str, values: list[float]) -> str:
    return f"| {name} | {len(values)} | {percentile(values, 50):.1f} | {percentile(values, 99):.1f} |"


async def measure(address: str, workdir: Path, *, turns: int, runs: int, direct: int) -> str:
    client = await Client.connect(address)
    one = {"s0": time_server()}
    five = {f"s{n}": {**time_server(), "args": ["--local-timezone", _ZONES[n]]} for n in range(5)}
    call_histories = await _runs(client, address, workdir, one, runs, turns)
    hartflow_calls = [ms for events in call_histories for ms in _activity_ms(events, "mcp.call_tool")]
    floor = await _direct(direct)
    lines = ["| MCP tool call (`mcp-server-time`, stdio) | samples | p50 ms | p99 ms |", "|---|---|---|---|"]
    lines += [
        _row("direct: `mcp` client, one session, in a loop", floor),
        _row("hartflow: `mcp.call_tool` activity, pooled session", hartflow_calls),
    ]
    lines += [
        "",
        "| discovery per run (`mcp.list_tools`) | cold (first run) ms | warm p50 ms | warm runs |",
        "|---|---|---|---|",
    ]
    for label, servers in (("1 server", one), ("5 servers", five)):
        histories = await _runs(client, address, workdir, servers, runs, 1)
        times = [_activity_ms(events, "mcp.list_tools")[0] for events in histories]
        warm = times[1:] or times
        lines.append(f"| {label} | {times[0]:.1f} | {percentile(warm, 50):.1f} | {len(warm)} |")
    return "\n".join(lines)


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=20, help="MCP calls per run (one per turn)")
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement")
    parser.add_argument("--direct", type=int, default=200, help="direct calls for the floor")
    parser.add_argument("--address", help="an existing Temporal frontend; default: start a dev server")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hartflow-bench-mcp-") as tmp:
        server = None if args.address else DevServer(DevServerOptions(port=free_port(), ui=False))
        if server is not None:
            await asyncio.to_thread(server.start)
        address = args.address or (server.address if server is not None else "")
        try:
            table = await measure(address, Path(tmp), turns=args.calls, runs=args.runs, direct=args.direct)
        finally:
            if server is not None:
                server.stop()
    print(table)


if __name__ == "__main__":
    asyncio.run(main())
