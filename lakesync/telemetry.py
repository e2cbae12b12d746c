"""OpenTelemetry traces of a push's way to the destinations: push → hot log → flush → pipeline
run → shipment, in one trace.

Off unless the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_TRACES_EXPORTER``) variable is
set: then :func:`configure` installs the SDK's tracer provider with the exporter those variables
name (OTLP over http/protobuf by default; every other ``OTEL_*`` setting is the SDK's own). When
off, :func:`span` is one module-level boolean test, and nothing of OpenTelemetry is imported.
The gateway's Prometheus metrics (``/metrics``, which stays) are then also reported through the
SDK's meter provider (:func:`export_metrics`; ``OTEL_METRICS_EXPORTER=none`` turns that off).

How the stages find the push's trace: the gateway's push span is remembered with the batch's last
ingest position (:func:`remember_push`); the flush that lands those positions starts its span as a
child of the first such push and links the others (:func:`flush_span`); the pipeline run that
follows starts as a child of the first landed push's trace and links the rest
(:func:`pipeline_span`); each shipment is a child of the run. The contexts wait in this process
(bounded), which is where ``lakesync up`` flushes; its pipeline worker (another process) gets
them as W3C ``traceparent`` values with each run request (:func:`take_landed`). A ``lakesync
pipeline run`` started by hand, or a push taken before a restart, starts a trace of its own.
"""

from __future__ import annotations

import functools
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from lakesync.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.trace import Span, SpanContext, Tracer


class PrometheusRegistry(Protocol):
    """What :func:`export_metrics` reads: a ``prometheus_client`` registry."""

    def collect(self) -> Iterable[Any]:
        """The metric families, with their samples."""
        ...

__all__ = [
    "MetricDefinition",
    "completed_span",
    "configure",
    "enable",
    "enabled",
    "export_metrics",
    "flush_span",
    "format_traceparent",
    "metric_definitions",
    "parse_traceparent",
    "pipeline_span",
    "remember_push",
    "reset",
    "span",
    "take_landed",
    "tracing_requested",
]

_TRACER = "lakesync"
_MAX_PENDING = 10_000
"""Push contexts kept for the next flush at most (the oldest are dropped first)."""

_enabled = False
_lock = threading.Lock()
_pending: dict[int, str] = {}
"""Push spans (W3C ``traceparent``) by the last ingest position of their batch, not yet landed."""
_landed: list[str] = []
"""Push spans (W3C ``traceparent``) landed by a flush, not yet taken by a pipeline run."""
_NOOP: AbstractContextManager[None] = nullcontext()
_registries: weakref.WeakSet[PrometheusRegistry] = weakref.WeakSet()
"""The Prometheus registries :func:`export_metrics` reports (an app's lives as long as it)."""
_instruments: set[str] = set()


def tracing_requested(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the standard ``OTEL_*`` variables ask for trace export (pure)."""
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none" or environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    return bool(exporter or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def configure(environ: Mapping[str, str] = os.environ) -> bool:
    """Install the SDK's tracer provider with the exporter the ``OTEL_*`` variables name, when
    they ask for one (see :func:`tracing_requested`) and tracing is not on yet; returns whether
    tracing is on. Needs the ``otel`` extra (``pip install 'lakesync[otel]'``)."""
    if _enabled or not tracing_requested(environ):
        return _enabled
    try:
        # The SDK is an optional extra: loaded only when the environment asks for export.
        from opentelemetry import trace  # noqa: PLC0415
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )
    except ImportError as exc:
        raise ConfigError(
            "OTEL_* variables ask for trace export: pip install 'lakesync[otel]'"
        ) from exc
    exporter: SpanExporter
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "console":
        exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter,
        )

        exporter = OTLPSpanExporter()  # endpoint, headers, timeout: from OTEL_EXPORTER_OTLP_*
    attributes = {} if "OTEL_SERVICE_NAME" in environ else {"service.name": "lakesync"}
    resource = Resource.create(attributes)
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    if environ.get("OTEL_METRICS_EXPORTER", "otlp").strip().lower() == "otlp":
        from opentelemetry import metrics  # noqa: PLC0415 -- optional, as above
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # noqa: PLC0415
            OTLPMetricExporter,
        )
        from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415
        from opentelemetry.sdk.metrics.export import (  # noqa: PLC0415
            PeriodicExportingMetricReader,
        )

        # The interval is OTEL_METRIC_EXPORT_INTERVAL's, the endpoint OTEL_EXPORTER_OTLP_*'s.
        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
        metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))
    enable()
    return True


@dataclass(frozen=True, slots=True)
class MetricDefinition:
    """One metric as OTLP reports it (and ``/metrics`` shows it): its name, instrument kind
    (``counter`` or ``gauge``), UCUM unit, label names and help text."""

    name: str
    kind: str
    unit: str
    labels: tuple[str, ...]
    help: str


def metric_definitions(registry: PrometheusRegistry) -> list[MetricDefinition]:
    """The metrics of a Prometheus registry as :func:`export_metrics` reports them: a counter
    as ``<name>_total``, a gauge as itself, a histogram as its ``_count`` and ``_sum`` counters;
    label names are those of the samples present (pure)."""
    out: list[MetricDefinition] = []
    for family in registry.collect():
        unit = "s" if family.name.endswith("_seconds") else (
            "By" if family.name.endswith("_bytes") else "1")
        labels = tuple(sorted({k for sample in family.samples for k in sample.labels} - {"le"}))
        match family.type:
            case "counter":
                out.append(MetricDefinition(f"{family.name}_total", "counter", unit, labels,
                                            family.documentation))
            case "gauge":
                out.append(MetricDefinition(family.name, "gauge", unit, labels,
                                            family.documentation))
            case "histogram":
                out.append(MetricDefinition(f"{family.name}_count", "counter", "1", labels,
                                            f"{family.documentation} (count)"))
                out.append(MetricDefinition(f"{family.name}_sum", "counter", unit, labels,
                                            f"{family.documentation} (sum)"))
    return out


def export_metrics(registry: PrometheusRegistry) -> None:
    """Report a Prometheus registry's metrics through the OpenTelemetry meter provider too
    (:func:`metric_definitions`; labels become attributes). Nothing when tracing is off;
    ``/metrics`` stays as it is. Several registries (apps) of one process report together."""
    if not _enabled:
        return
    from opentelemetry import metrics  # noqa: PLC0415 -- optional; only when tracing is on

    meter = metrics.get_meter(_TRACER)
    with _lock:
        _registries.add(registry)
        for m in metric_definitions(registry):
            if m.name in _instruments:
                continue  # an instrument is made once per process; it reads every registry
            _instruments.add(m.name)
            create = (meter.create_observable_counter if m.kind == "counter"
                      else meter.create_observable_gauge)
            create(m.name, [_observe(m.name)], m.unit, m.help)


def _observe(sample: str) -> Callable[[Any], Iterable[Any]]:
    from opentelemetry.metrics import Observation  # noqa: PLC0415 -- optional

    def observe(_options: Any) -> Iterable[Any]:
        with _lock:
            registries = list(_registries)
        return [Observation(s.value, dict(s.labels)) for r in registries
                for family in r.collect() for s in family.samples if s.name == sample]

    return observe


def enable(on: bool = True) -> None:
    """Turn span recording on (or off) against the global tracer provider, whoever set it (a
    test installs one with the SDK's in-memory exporter)."""
    global _enabled  # noqa: PLW0603 -- one switch for the process, read on every span
    _enabled = on


def enabled() -> bool:
    """Whether spans are recorded."""
    return _enabled


def reset() -> None:
    """Forget the push contexts waiting for a flush or a run and the registries reporting
    metrics (tests: an app of an earlier test may still be alive)."""
    with _lock:
        _pending.clear()
        _landed.clear()
        _registries.clear()


def span(name: str, attributes: Mapping[str, Any] | None = None) -> AbstractContextManager[Any]:
    """A span named ``name`` as a child of the current one; a shared no-op when tracing is off."""
    if not _enabled:
        return _NOOP
    return _span(name, attributes)


@contextmanager
def _span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    parent: SpanContext | None = None,
    links: list[SpanContext] | None = None,
) -> Iterator[Span]:
    from opentelemetry import trace  # noqa: PLC0415 -- optional; only when tracing is on

    context = None if parent is None else trace.set_span_in_context(trace.NonRecordingSpan(parent))
    with _tracer().start_as_current_span(
        name,
        context=context,
        attributes=dict(attributes or {}),
        links=[trace.Link(c) for c in links or []],
    ) as current:
        yield current


def remember_push(position: int) -> None:
    """Keep the current (push) span's context for the flush that lands ``position``."""
    if not _enabled:
        return
    from opentelemetry import trace  # noqa: PLC0415 -- optional; only when tracing is on

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return
    with _lock:
        _pending[position] = format_traceparent(
            context.trace_id, context.span_id, context.trace_flags
        )
        while len(_pending) > _MAX_PENDING:
            del _pending[next(iter(_pending))]


def flush_span(through: int, attributes: Mapping[str, Any]) -> AbstractContextManager[Any]:
    """The span of a landing commit through ingest position ``through``: a child of the first
    push it lands, linked to the others (none: a trace of its own)."""
    if not _enabled:
        return _NOOP
    with _lock:
        landed = [c for p, c in _pending.items() if p <= through]
        for p in [p for p in _pending if p <= through]:
            del _pending[p]
        _landed.extend(landed)
        del _landed[:-_MAX_PENDING]
    return _span("lakesync.flush", attributes, *_parent_and_links(landed))


def take_landed() -> list[str]:
    """The pushes (W3C ``traceparent`` values) landed since the last call: what the next
    pipeline run continues (the gateway sends them to its pipeline worker with the request)."""
    if not _enabled:
        return []
    with _lock:
        landed = list(_landed)
        _landed.clear()
    return landed


def pipeline_span(
    attributes: Mapping[str, Any] | None = None, pushes: Sequence[str] | None = None
) -> AbstractContextManager[Any]:
    """The span of a pipeline run: a child of the first push (W3C ``traceparent``) in
    ``pushes`` (default: :func:`take_landed`), linked to the others; shipments reported inside
    it (:func:`completed_span`) are its children."""
    if not _enabled:
        return _NOOP
    return _span("lakesync.pipeline.run", attributes,
                 *_parent_and_links(take_landed() if pushes is None else pushes))


def format_traceparent(trace_id: int, span_id: int, flags: int) -> str:
    """A span's W3C ``traceparent`` header value (pure)."""
    return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"


def parse_traceparent(value: str) -> tuple[int, int, int] | None:
    """``(trace_id, span_id, flags)`` of a W3C ``traceparent`` value; None if it is not one
    (pure)."""
    parts = value.strip().split("-")
    if len(parts) != 4 or parts[0] != "00" or [len(p) for p in parts[1:]] != [32, 16, 2]:
        return None
    try:
        trace_id, span_id, flags = (int(p, 16) for p in parts[1:])
    except ValueError:
        return None
    return (trace_id, span_id, flags) if trace_id and span_id else None


@functools.cache
def _tracer() -> Tracer:
    # One tracer for the process: a proxy until a provider is set, then the provider's.
    from opentelemetry import trace  # noqa: PLC0415 -- optional; only when tracing is on

    return trace.get_tracer(_TRACER)


def _parent_and_links(pushes: Sequence[str]) -> tuple[SpanContext | None, list[SpanContext]]:
    from opentelemetry.trace import SpanContext, TraceFlags  # noqa: PLC0415 -- optional

    contexts = [
        SpanContext(t, s, is_remote=True, trace_flags=TraceFlags(f))
        for t, s, f in filter(None, map(parse_traceparent, pushes))
    ]
    return (contexts[0], contexts[1:]) if contexts else (None, [])


def completed_span(
    name: str, attributes: Mapping[str, Any], elapsed_s: float, error: str | None = None
) -> None:
    """Record a span that ended now after ``elapsed_s`` seconds (a shipment, reported once
    done) as a child of the current span; ``error`` marks it failed."""
    if not _enabled:
        return
    from opentelemetry import trace  # noqa: PLC0415 -- optional; only when tracing is on

    end = time.time_ns()
    done = _tracer().start_span(
        name, attributes=dict(attributes), start_time=end - int(elapsed_s * 1e9)
    )
    if error is not None:
        done.set_status(trace.Status(trace.StatusCode.ERROR, error))
    done.end(end_time=end)
