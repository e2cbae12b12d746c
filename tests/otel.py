"""The SDK's in-memory span exporter behind the process's tracer provider, for trace tests."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from lakesync import telemetry

__all__ = ["by_name", "metric_reader", "spans"]


@cache
def _exporter() -> InMemorySpanExporter:
    # The global provider can be set once per process: every trace test shares this one.
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on, into an emptied in-memory exporter; off again afterwards."""
    exporter = _exporter()
    exporter.clear()
    telemetry.reset()
    telemetry.enable()
    try:
        yield exporter
    finally:
        telemetry.enable(False)
        telemetry.reset()


def by_name(exporter: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    """The finished spans, grouped by name."""
    out: dict[str, list[ReadableSpan]] = {}
    for s in exporter.get_finished_spans():
        out.setdefault(s.name, []).append(s)
    return out


@cache
def metric_reader() -> InMemoryMetricReader:
    """The SDK's in-memory metric reader behind the process's meter provider (set once)."""
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return reader
