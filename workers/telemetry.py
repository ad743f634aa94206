"""Telemetry of a hartflow process: OpenTelemetry traces through Temporal's plugin, SDK metrics for Prometheus.

Traces (``telemetry.traces`` in hartflow.yaml): the process gets Temporal's replay-safe tracer provider, with
the configured exporter, and every client :func:`workers.worker.connect` makes carries Temporal's
``OpenTelemetryPlugin``; workers built from such a client inherit it. A run is then one trace: the client's
``StartWorkflow:HartflowRun``, the workflow (``RunWorkflow:HartflowRun``), a span per middleware hook
(``workflows/run/dispatcher.py``), and per activity ``StartActivity``/``RunActivity`` with the model or tool span
inside (``activities/tracing.py``).

Metrics (``telemetry.prometheus_bind``): the long-lived worker processes (``hartflow worker``, ``hartflow dev``)
serve the SDK's worker metrics (task latencies, slots, polls, …) at ``http://BIND/metrics``.

OpenTelemetry allows one global tracer provider per process, and the plugin insists it be the replay-safe
one, so the provider and each exporter are installed once per process and reused by every later client.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
from temporalio.client import Plugin
from temporalio.contrib.opentelemetry import OpenTelemetryPlugin, ReplaySafeTracerProvider, create_tracer_provider
from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    PrometheusConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)

from workers.config import TelemetrySettings

_processors: dict[tuple[str, str], SpanProcessor] = {}
_runtimes: dict[str, Runtime] = {}


class TelemetryError(RuntimeError):
    """Tracing cannot be set up in this process."""


def tracer_provider(service_name: str = "hartflow") -> ReplaySafeTracerProvider:
    """The process's replay-safe tracer provider, installed as the global one on first use."""
    current = trace.get_tracer_provider()
    if isinstance(current, ReplaySafeTracerProvider):
        return current
    if not isinstance(current, trace.ProxyTracerProvider):
        raise TelemetryError(
            f"another OpenTelemetry tracer provider ({type(current).__name__}) is installed in this process; "
            "Temporal's tracing plugin needs its replay-safe provider (temporalio.contrib.opentelemetry)"
        )
    provider = create_tracer_provider(resource=Resource.create({"service.name": service_name}))
    trace.set_tracer_provider(provider)
    return provider


def add_span_processor(processor: SpanProcessor, service_name: str = "hartflow") -> None:
    """Send this process's spans to one more processor (an embedding application's exporter, a test's)."""
    tracer_provider(service_name).add_span_processor(processor)


def client_plugins(settings: TelemetrySettings) -> Sequence[Plugin]:
    """The plugins a client needs for ``settings``: Temporal's OpenTelemetry plugin when traces go somewhere."""
    if settings.traces == "none":
        return []
    destination = settings.otlp_endpoint if settings.traces == "otlp" else "stderr"
    key = (settings.traces, destination)
    if key not in _processors:
        processor: SpanProcessor
        if settings.traces == "otlp":
            processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.otlp_endpoint))
        else:
            # stderr: stdout carries the command's own output (``--json``).
            processor = SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr, formatter=_one_line))
        add_span_processor(processor, settings.service_name)
        _processors[key] = processor
    # Temporal's own spans (start, run, activity, signal, update) are what links the hooks into one trace.
    return [OpenTelemetryPlugin(add_temporal_spans=True)]


def runtime(settings: TelemetrySettings, *, serve_metrics: bool = False) -> Runtime:
    """The Temporal runtime of this process's clients and workers.

    The SDK core's own log lines (a slow workflow task, an abandoned activity attempt) go to Python logging as
    ``temporalio.core`` records, so to stderr: the default runtime prints them on stdout, in the middle of a
    command's ``--json`` output. ``serve_metrics`` (a long-lived worker) adds SDK metrics for Prometheus when
    ``telemetry.prometheus_bind`` is set."""
    bind = settings.prometheus_bind if serve_metrics else None
    key = bind or ""
    if key not in _runtimes:
        # One runtime per address: a second one would try to bind the same port.
        _runtimes[key] = Runtime(
            telemetry=TelemetryConfig(
                logging=LoggingConfig(
                    filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
                    forwarding=LogForwardingConfig(logger=logging.getLogger("temporalio.core")),
                ),
                metrics=PrometheusConfig(bind_address=bind) if bind else None,
            )
        )
    return _runtimes[key]


def flush() -> None:
    """Export spans still buffered: a CLI command exits with ``os._exit``, which skips exit hooks."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, ReplaySafeTracerProvider):
        provider.force_flush()


def _one_line(span: ReadableSpan) -> str:
    context = span.get_span_context()
    trace_id = format(context.trace_id, "032x") if context is not None else "?"
    duration = (span.end_time or 0) - (span.start_time or 0)
    attributes = " ".join(f"{k}={v!s}" for k, v in (span.attributes or {}).items() if k.startswith("hartflow."))
    return f"span {span.name} · {duration / 1e6:.1f} ms · trace {trace_id} {attributes}".rstrip() + "\n"
