"""Trace context propagation (:mod:`lakesync.telemetry`): a push through the gateway
app, the flush that lands it, the pipeline run (in this process or the worker's, given the
traceparents) and its shipments form one trace; off, nothing is recorded."""

from __future__ import annotations

from pathlib import Path

from litestar.testing import TestClient
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from lakesync import telemetry
from lakesync.api.app import create_app
from lakesync.api.metrics import GatewayMetrics
from lakesync.lakehouse.worker import RunRequest
from tests.api.helpers import Gateway, delta, make_settings, token
from tests.otel import by_name, metric_reader, spans

__all__ = ["spans"]  # the fixture


def _push(tmp_path: Path, n: int = 1) -> list[int]:
    with TestClient(create_app(make_settings(tmp_path))) as client:
        gw = Gateway(client)
        heads = []
        for i in range(n):
            # A client with view evictions is answered the head: this batch's position.
            r = gw.push(token("alice"), "alice", [delta("INSERT", f"r{i}", "alice", title="x")],
                        evictions=True)
            assert r.status_code == 200, r.text
            heads.append(int(r.json()["serverHlc"]))
        return heads


def test_traceparent_round_trips_and_rejects_what_is_not_one() -> None:
    value = telemetry.format_traceparent(0xABC, 0x12, 1)
    assert value == "00-00000000000000000000000000000abc-0000000000000012-01"
    assert telemetry.parse_traceparent(value) == (0xABC, 0x12, 1)
    for bad in ["", "00-abc-12-01", "01-" + value[3:], value.replace("a", "g"),
                "00-" + "0" * 32 + "-0000000000000012-01"]:
        assert telemetry.parse_traceparent(bad) is None, bad


def test_only_the_standard_variables_turn_export_on() -> None:
    assert not telemetry.tracing_requested({})
    assert telemetry.tracing_requested({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert telemetry.tracing_requested({"OTEL_TRACES_EXPORTER": "console"})
    assert not telemetry.tracing_requested({"OTEL_TRACES_EXPORTER": "none",
                                            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert not telemetry.tracing_requested({"OTEL_SDK_DISABLED": "true",
                                            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert not telemetry.configure({})  # nothing asked: stays off


def test_a_push_its_flush_its_run_and_its_shipments_are_one_trace(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    heads = _push(tmp_path, 2)
    with telemetry.flush_span(heads[-1], {"lakesync.entries": 2}):
        pass
    with telemetry.pipeline_span():
        telemetry.completed_span("lakesync.shipment", {"lakesync.destination": "pg"}, 0.5)
        telemetry.completed_span("lakesync.shipment", {"lakesync.destination": "down"}, 0.1,
                                 "cannot connect")
    got = by_name(spans)
    push, later = got["lakesync.push"]
    [append, _] = got["lakesync.hotlog.append"]
    [flush] = got["lakesync.flush"]
    [run] = got["lakesync.pipeline.run"]
    shipments = got["lakesync.shipment"]
    assert append.parent is not None and append.parent.span_id == push.context.span_id
    # The first push is the trace's root; the second is linked from the flush.
    assert flush.parent is not None and flush.parent.span_id == push.context.span_id
    assert [link.context.span_id for link in flush.links] == [later.context.span_id]
    assert run.parent is not None and run.parent.span_id == push.context.span_id
    assert [link.context.span_id for link in run.links] == [later.context.span_id]
    assert {s.parent.span_id for s in shipments if s.parent} == {run.context.span_id}
    assert {s.context.trace_id for s in [push, append, flush, run, *shipments]} == {
        push.context.trace_id
    }
    assert [s.status.status_code.name for s in shipments] == ["UNSET", "ERROR"]
    assert shipments[0].end_time - shipments[0].start_time == 500_000_000


def test_the_worker_continues_the_trace_from_the_pushes_in_its_request(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    [head] = _push(tmp_path)
    assert telemetry.take_landed() == []  # not landed yet
    with telemetry.flush_span(head, {}):
        pass
    # The gateway's side of the pipe, then the worker's (which has no pushes of its own).
    request = RunRequest(pushes=telemetry.take_landed())
    assert telemetry.take_landed() == []  # taken once
    with telemetry.pipeline_span(pushes=request.pushes):
        pass
    [push] = by_name(spans)["lakesync.push"]
    [run] = by_name(spans)["lakesync.pipeline.run"]
    assert run.parent is not None and run.parent.span_id == push.context.span_id
    assert run.context.trace_id == push.context.trace_id


def test_a_flush_lands_only_the_pushes_up_to_its_position(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    first, second = _push(tmp_path, 2)
    with telemetry.flush_span(first, {}):
        pass
    assert len(telemetry.take_landed()) == 1
    with telemetry.flush_span(second, {}):
        pass
    pushes = by_name(spans)["lakesync.push"]
    flushes = by_name(spans)["lakesync.flush"]
    assert [f.parent.span_id for f in flushes if f.parent] == [
        p.context.span_id for p in pushes
    ]


def test_off_nothing_is_recorded(tmp_path: Path) -> None:
    assert not telemetry.enabled()
    _push(tmp_path)
    with telemetry.flush_span(1 << 62, {}), telemetry.pipeline_span():
        telemetry.completed_span("lakesync.shipment", {}, 0.1)
    assert telemetry.take_landed() == []


def test_the_prometheus_metrics_are_reported_through_the_meter_provider(
    spans: InMemorySpanExporter,
) -> None:
    reader = metric_reader()
    gateway = GatewayMetrics()
    telemetry.export_metrics(gateway.registry)
    gateway.count("gw9", "pushes", 3)
    gateway.hotlog_unflushed.set(42)
    gateway.push_seconds.observe(0.5)
    data = reader.get_metrics_data()
    assert data is not None
    # The fixture forgot the registries of earlier tests' apps (an unlabelled gauge of two live
    # apps would report whichever came last); gather every scope's points by name.
    points: dict[str, tuple[str, list[tuple[dict[str, object], float]]]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                _, seen = points.setdefault(m.name, (m.unit, []))
                seen.extend((dict(p.attributes or {}), p.value) for p in m.data.data_points)
    assert ({"gateway": "gw9"}, 3.0) in points["lakesync_push_total"][1]
    assert points["lakesync_push_total"][0] == "1"
    assert points["lakesync_hotlog_unflushed_bytes"][0] == "By"
    assert ({}, 42.0) in points["lakesync_hotlog_unflushed_bytes"][1]
    assert points["lakesync_push_seconds_count"][1] == [({}, 1.0)]
    assert points["lakesync_push_seconds_sum"][0] == "s"
    assert points["lakesync_push_seconds_sum"][1] == [({}, 0.5)]


def test_the_otel_variables_export_spans_and_metrics_over_otlp_http(tmp_path: Path) -> None:
    """A process configured only by ``OTEL_EXPORTER_OTLP_ENDPOINT`` posts its spans and metrics
    (OTLP http/protobuf) to an in-process collector."""
    import os
    import subprocess
    import sys
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    received: dict[str, list[bytes]] = {}

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.setdefault(self.path, []).append(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    script = (
        "from lakesync.api.metrics import GatewayMetrics\n"
        "from lakesync import telemetry\n"
        "assert telemetry.configure()\n"
        "m = GatewayMetrics(); telemetry.export_metrics(m.registry); m.count('gw1', 'pushes')\n"
        "with telemetry.span('lakesync.push', {'lakesync.gateway': 'gw1'}):\n"
        "    pass\n"
    )
    # The repository's own `lakesync` (a worktree's), as in the test process.
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{server.server_port}",
           "OTEL_SERVICE_NAME": "lakesync-test", "PYTHONPATH": root}
    try:
        done = subprocess.run([sys.executable, "-c", script], check=False, env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr
    traces = ExportTraceServiceRequest.FromString(received["/v1/traces"][0])
    [resource] = traces.resource_spans
    service = {a.key: a.value.string_value for a in resource.resource.attributes}
    assert service["service.name"] == "lakesync-test"
    assert [s.name for ss in resource.scope_spans for s in ss.spans] == ["lakesync.push"]
    # The meter provider exports once more at exit: the push counter is there.
    names = {m.name for body in received["/v1/metrics"]
             for rm in ExportMetricsServiceRequest.FromString(body).resource_metrics
             for sm in rm.scope_metrics for m in sm.metrics}
    assert "lakesync_push_total" in names
