"""The two Agent Servers the API benchmark compares, each started the way its users start it.

* hartflow: ``hartflow serve`` (one API process) on a Temporal dev server of its own, with one ``hartflow worker``
  process running the runs (the API process is stateless; the worker is where a run's steps execute).
* the peer: ``langgraph dev`` (``langgraph-api`` + ``langgraph-runtime-inmem``, one process running both the
  API and the graph) serving ``bench/api_peer_graph.py``, offline (no analytics, no tracing), with as many
  concurrent jobs allowed as the benchmark starts runs (its default is 1 here), so neither side queues runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from bench import hartflow_side
from bench.api_peer_graph import TURNS
from bench.workload import responses, write_script
from workers.devserver import DevServer, free_port
from workers.devserver_options import DevServerOptions
from workers.testing.api_server import ApiServer

REPO = Path(__file__).resolve().parents[1]
PEER_GRAPH = "bench"
HARTFLOW_ASSISTANT = "hartflow"
_READY_TIMEOUT = 180.0
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@contextlib.contextmanager
def hartflow_api(workdir: Path, turns: int = TURNS) -> Iterator[str]:
    """``hartflow serve`` + one ``hartflow worker`` on a fresh dev server; yields the API's URL."""
    workdir.mkdir(parents=True)
    server = DevServer(DevServerOptions(db_file=workdir / "temporal.db", port=free_port(), ui=False))
    server.start()
    try:
        config = hartflow_side.bench_config(
            workdir / "home",
            server.address,
            "bench-api",
            turns=turns,
            model=write_script(workdir, responses(turns), f"api-{turns}"),
        )
        with hartflow_side.worker_processes(config, workdir / "worker.yaml"):
            api = ApiServer(hartflow_side.write_worker_config(config, workdir / "serve.yaml")).start()
            try:
                yield api.url
            finally:
                api.stop()
                if any("Traceback" in line or "ERROR" in line for line in api.stderr):
                    print("hartflow serve logged errors:\n" + "".join(api.stderr[-60:]), file=sys.stderr)
    finally:
        server.stop()


@contextlib.contextmanager
def langgraph_dev(
    workdir: Path, jobs: int, turns: int = TURNS, graph: Path = REPO / "bench" / "api_peer_graph.py", **env_extra: str
) -> Iterator[str]:
    """``langgraph dev`` serving the peer graph (``graph``, its environment plus ``env_extra``); yields its URL
    once it has started up."""
    directory = workdir / "langgraph"
    directory.mkdir(parents=True)
    (directory / "langgraph.json").write_text(
        json.dumps({"dependencies": [str(REPO)], "graphs": {PEER_GRAPH: f"{graph}:graph"}}), encoding="utf-8"
    )
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")},
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGSMITH_TRACING": "false",
        "PYTHONPATH": str(REPO),
        "HARTFLOW_BENCH_API_TURNS": str(turns),
        **env_extra,
    }
    langgraph = Path(sys.executable).with_name("langgraph")
    process = subprocess.Popen(
        [str(langgraph), "dev", "--no-browser", "--no-reload", "--port", str(port), "--n-jobs-per-worker", str(jobs)],
        cwd=directory,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_started(process)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_started(process: subprocess.Popen[str]) -> None:
    """Read its log until it says it started (then keep draining it, so it never blocks on a full pipe)."""
    assert process.stdout is not None
    seen: list[str] = []
    started = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            seen.append(_ANSI.sub("", line))
            if "Application started up" in seen[-1]:
                started.set()
        started.set()

    threading.Thread(target=read, daemon=True).start()
    if not started.wait(_READY_TIMEOUT) or process.poll() is not None:
        raise RuntimeError("langgraph dev did not start:\n" + "".join(seen[-30:]))
