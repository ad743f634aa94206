"""OpenTelemetry traces and SDK metrics, on real runs: the span tree (in-memory exporter), the OTLP/HTTP exporter
against a real HTTP receiver, ``hartflow dev --trace`` on the console, and the Prometheus endpoint."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from middlewares.chain import build_lead_chain
from tests.support import start_run
from workers import telemetry
from workers.devserver import free_port
from workers.testing import (
    answer,
    ask_clarification,
    calls,
    make_config,
    running_worker,
    settle,
    tool_call,
    write_script,
)
from workers.worker import connect
from workflows.run import ReplyInput, RunView


class OtlpReceiver:
    """A minimal OTLP/HTTP traces endpoint: decodes each export request and keeps its spans."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        received = self.spans

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                request = ExportTraceServiceRequest()
                request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
                received.extend(
                    span
                    for resource in request.resource_spans
                    for scope in resource.scope_spans
                    for span in scope.spans
                )
                body = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture(scope="module")
def memory() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    telemetry.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    yield server
    server.close()


def _trace_of(spans: list[ReadableSpan], workflow_id: str) -> list[ReadableSpan]:
    root = next(
        s for s in spans if s.name == "StartWorkflow:HartflowRun" and _attr(s, "temporalWorkflowID") == workflow_id
    )
    trace_id = root.context.trace_id
    return [s for s in spans if s.context.trace_id == trace_id]


def _attr(span: ReadableSpan, key: str) -> Any:
    return (span.attributes or {}).get(key)


def _parent(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan | None:
    if span.parent is None:
        return None
    return next((s for s in spans if s.context.span_id == span.parent.span_id), None)


def _ancestors(span: ReadableSpan, spans: list[ReadableSpan]) -> list[str]:
    names = []
    parent = _parent(span, spans)
    while parent is not None:
        names.append(parent.name)
        parent = _parent(parent, spans)
    return names


async def test_a_run_is_one_trace_with_a_span_per_hook_model_and_tool_call(
    home: Path, temporal_address: str, memory: InMemorySpanExporter, receiver: OtlpReceiver
) -> None:
    config = make_config(home, temporal_address, telemetry={"traces": "otlp", "otlp_endpoint": receiver.endpoint})
    usage = {"input_tokens": 12, "output_tokens": 5}
    model = write_script(
        home,
        [
            {**calls(tool_call("bash", "b1", command="ls -la /mnt/user-data; exit 3")), "usage_metadata": usage},
            ask_clarification(options=["a"]),
            answer("done"),
        ],
    )
    client = await connect(config)
    # No workflow cache: every workflow task replays the whole history, so spans that were not replay-safe
    # would show up once per task.
    async with running_worker(client, config, max_cached_workflows=0):
        handle = await start_run(client, config, "look around", model=model)
        assert (await settle(handle)).status == "awaiting_input"
        await handle.execute_update("reply", ReplyInput(option_id="option-1"), result_type=RunView)
        final = await handle.result()
    assert final.status == "completed"
    telemetry.flush()

    spans = _trace_of(list(memory.get_finished_spans()), handle.id)
    names = [s.name for s in spans]
    root = next(s for s in spans if s.parent is None)
    assert root.name == "StartWorkflow:HartflowRun", "the trace starts at the client's start"
    run = next(s for s in spans if s.name == "RunWorkflow:HartflowRun")
    assert _parent(run, spans) is root

    # Every hook call is one span, under the workflow, with its coordinates; replays added none. Three model
    # calls; two tool calls (bash, ask_clarification) pass every tool wrapper.
    chain = build_lead_chain(config.run)
    calls_per_hook = {"before_agent": 1, "after_agent": 1, "before_model": 3, "after_model": 3}
    calls_per_hook |= {"wrap_model_call": 3, "wrap_tool_call": 2}
    expected = {f"{mw.name}.{hook}": calls_per_hook[hook] for mw in chain for hook in mw.hooks()}
    assert {name: names.count(name) for name in expected} == expected
    release = next(s for s in spans if s.name == "Sandbox.after_agent")
    assert _parent(release, spans) is run
    assert {k: _attr(release, f"hartflow.{k}") for k in ("middleware", "hook", "thread_id", "run_id", "turn")} == {
        "middleware": "Sandbox",
        "hook": "after_agent",
        "thread_id": final.thread_id,
        "run_id": final.run_id,
        "turn": 3,
    }

    # The first middleware is the outermost wrapper: the chain nests, and the model activity sits inside it.
    model_spans = [s for s in spans if s.name.startswith("model scripted:")]
    assert len(model_spans) == 3
    first = min(model_spans, key=lambda s: s.start_time or 0)
    wrappers = [n for n in _ancestors(first, spans) if n.endswith(".wrap_model_call")]
    assert wrappers == [f"{mw.name}.wrap_model_call" for mw in reversed(chain) if mw.implements("wrap_model_call")]
    assert _ancestors(first, spans)[:2] == ["RunActivity:model.invoke", "StartActivity:model.invoke"]
    assert _ancestors(first, spans)[-2:] == ["RunWorkflow:HartflowRun", "StartWorkflow:HartflowRun"]
    assert _attr(first, "gen_ai.request.model") == model
    assert (_attr(first, "gen_ai.usage.input_tokens"), _attr(first, "gen_ai.usage.output_tokens")) == (12, 5)
    assert _attr(first, "hartflow.attempt") == 1

    [tool] = [s for s in spans if s.name == "tool bash"]
    assert _attr(tool, "hartflow.tool.exit_code") == 3
    assert _attr(tool, "hartflow.tool.status") == "success"
    assert _attr(tool, "hartflow.sandbox_id")
    tool_wrappers = [n for n in _ancestors(tool, spans) if n.endswith(".wrap_tool_call")]
    assert tool_wrappers == [f"{mw.name}.wrap_tool_call" for mw in reversed(chain) if mw.implements("wrap_tool_call")]

    # The same spans went out over OTLP/HTTP.
    exported = {span.name for span in receiver.spans}
    assert {"StartWorkflow:HartflowRun", "Sandbox.after_agent", "tool bash"} <= exported


def test_dev_trace_prints_spans_to_stderr(tmp_path: Path) -> None:
    port, ui_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "HARTFLOW_"))}
    env |= {
        "HARTFLOW_TEMPORAL__EMBEDDED_PORT": str(port),
        "HARTFLOW_TEMPORAL__EMBEDDED_UI_PORT": str(ui_port),
        "HARTFLOW_SANDBOX__ALLOW_HOST_BASH": "true",
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    model = write_script(tmp_path, [calls(tool_call("ls", "l1", path="/mnt/user-data")), answer("listed")])
    dev = subprocess.Popen(
        [sys.executable, "-m", "workers.cli", "dev", "--trace"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert dev.stdout is not None and dev.stderr is not None
        assert dev.stdout.readline().startswith("Web UI:"), "hartflow dev did not come up"
        run = subprocess.run(
            [sys.executable, "-m", "workers.cli", "run", "list", "--thread", "t-traced", "--model", model, "--json"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert run.returncode == 0, run.stderr
        seen: list[str] = []
        done = threading.Event()

        def read(stderr: IO[str]) -> None:
            for line in stderr:
                seen.append(line)
                if line.startswith("span RunWorkflow:HartflowRun"):
                    done.set()

        threading.Thread(target=read, args=(dev.stderr,), daemon=True).start()
        assert done.wait(60), "".join(seen)
    finally:
        dev.terminate()
        dev.wait(30)
    spans = [line for line in seen if line.startswith("span ")]
    release = next(line for line in spans if line.startswith("span Sandbox.after_agent"))
    assert "hartflow.thread_id=t-traced" in release and "hartflow.hook=after_agent" in release
    assert any(line.startswith("span tool ls") for line in spans)


async def test_worker_metrics_are_served_for_prometheus(home: Path, temporal_address: str) -> None:
    bind = f"127.0.0.1:{free_port()}"
    config = make_config(home, temporal_address, telemetry={"prometheus_bind": bind})
    client = await connect(config, serve_metrics=True)
    async with running_worker(client, config):
        handle = await start_run(client, config, "hi", model=write_script(home, [answer("hello")]))
        assert (await handle.result()).status == "completed"
    with urllib.request.urlopen(f"http://{bind}/metrics", timeout=10) as response:
        metrics = response.read().decode()
    queue = config.temporal.task_queue
    assert any(
        line.startswith("temporal_activity_execution_latency") and f'task_queue="{queue}"' in line
        for line in metrics.splitlines()
    )
    assert any(line.startswith("temporal_workflow_completed") for line in metrics.splitlines())


def test_no_telemetry_by_default(home: Path, temporal_address: str) -> None:
    config = make_config(home, temporal_address)
    assert config.telemetry.traces == "none"
    assert telemetry.client_plugins(config.telemetry) == []
    # No Prometheus endpoint: a worker's runtime is the one every command uses (core logs to Python logging).
    assert telemetry.runtime(config.telemetry, serve_metrics=True) is telemetry.runtime(config.telemetry)
