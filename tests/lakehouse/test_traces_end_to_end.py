"""Acceptance: a push read from the OpenTelemetry export through to its shipment is one
trace. In one process, with the SDK's in-memory span exporter: the gateway app takes a push, the
landing flush lands it, :func:`~lakesync.lakehouse.pipeline.run_and_ship` builds the models on
Spark and ships the change set to PostgreSQL. And across processes, over OTLP: ``lakesync up``
(the push and the flush) and its pipeline worker (the run and the shipment) post to one
in-process collector, and the spans share the push's trace."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import httpx
import psycopg
import pytest
from litestar.testing import TestClient
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from lakesync.api.app import create_app
from lakesync.config import Config, GatewayConfig
from lakesync.destination_specs import DestinationSpec
from lakesync.hlc import HLC
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.pipeline import run_and_ship
from lakesync.schema import parse_schema
from tests.api.helpers import Gateway, auth, delta, make_settings, token
from tests.conftest import drop_pg_database, fresh_pg_database
from tests.gateway_process import ServerProcess
from tests.otel import by_name, spans
from tests.wire_json import as_json

from .conftest import Lake

__all__ = ["spans"]  # the fixture

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow, pytest.mark.postgres]

TODOS = parse_schema({"table": "todos", "columns": [{"name": "title", "type": "string"}]})


def test_a_push_through_to_its_shipment_is_one_trace(
    lake: Lake, spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    url = fresh_pg_database()
    store = SqliteHotLog(tmp_path / "hotlog.sqlite3", HLC())
    config = Config(
        data_dir=lake.settings.data_dir, jwt_secrets=[],
        gateways={"gw1": GatewayConfig("gw1", [TODOS])},
        destinations={"pg": DestinationSpec("postgres", url, "gw1", ["todos"], "soft",
                                            name="pg")},
    )
    try:
        with TestClient(create_app(make_settings(tmp_path), store=store)) as client:
            r = Gateway(client).push(token("alice"), "alice",
                                     [delta("INSERT", "t1", "alice", title="traced")])
            assert r.status_code == 200, r.text
            assert LandingFlusher(open_catalog(lake.settings), store).flush().rows == 1
        outcome = run_and_ship(lake.settings, config, schemas=[TODOS], tests=False)
        assert not outcome.failures, outcome.failures
        with psycopg.connect(url) as conn:
            assert conn.execute("select row_id, title from todos").fetchall() == [
                ("t1", "traced")
            ]
    finally:
        store.close()
        drop_pg_database(url)

    got = by_name(spans)
    [push] = got["lakesync.push"]
    [append] = got["lakesync.hotlog.append"]
    [flush] = got["lakesync.flush"]
    [run] = got["lakesync.pipeline.run"]
    [shipment] = got["lakesync.shipment"]
    trace_ids = {s.context.trace_id for s in spans.get_finished_spans()}
    assert trace_ids == {push.context.trace_id}, "one trace, from the push to the shipment"
    parent = {s.context.span_id: s.parent.span_id if s.parent else None
              for s in (push, append, flush, run, shipment)}
    assert parent == {
        push.context.span_id: None,
        append.context.span_id: push.context.span_id,
        flush.context.span_id: push.context.span_id,
        run.context.span_id: push.context.span_id,
        shipment.context.span_id: run.context.span_id,
    }
    assert shipment.attributes is not None
    assert dict(shipment.attributes) == {
        "lakesync.destination": "pg", "lakesync.table": "todos", "lakesync.rows": 1
    }


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP trace collector: keeps each exported span as (name, trace id, parent)."""

    spans: ClassVar[list[tuple[str, bytes, bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/v1/traces":
            for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
                for ss in rs.scope_spans:
                    self.spans.extend((s.name, s.trace_id, s.parent_span_id) for s in ss.spans)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


def test_the_gateway_and_its_pipeline_worker_export_one_trace_over_otlp(tmp_path: Path) -> None:
    url = fresh_pg_database()
    config = tmp_path / "lakesync.yaml"
    config.write_text(
        "gateways:\n  gw1:\n    schemas:\n      - table: todos\n        columns:\n"
        "          - {name: title, type: string}\n"
        f"destinations:\n  pg:\n    kind: postgres\n    url: {url}\n    gateway: gw1\n"
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {"LAKESYNC_FLUSH_INTERVAL": "1", "LAKESYNC_PIPELINE_INTERVAL": "2",
           "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{server.server_port}",
           "OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_METRICS_EXPORTER": "none"}
    try:
        with ServerProcess(tmp_path / "data", env=env, config=config) as gw, \
                httpx.Client(base_url=gw.url, timeout=30) as http:
            todo = delta("INSERT", "t1", "alice", title="traced")
            r = http.post("/v1/sync/gw1/push", headers=auth(token("alice")),
                          json={"clientId": "alice", "deltas": [as_json(todo)]})
            assert r.status_code == 200, r.text
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not any(
                name == "lakesync.shipment" for name, _, _ in _Collector.spans
            ):
                time.sleep(1)
            assert gw.stop() == 0  # SIGTERM runs the orderly shutdown, which exports the rest
    finally:
        server.shutdown()
        drop_pg_database(url)
    # By name, the traces its spans are in: a scheduled run before the push (nothing to build)
    # has a trace of its own, so the push's run is looked for among them, not taken as the last.
    traces: dict[str, set[bytes]] = {}
    for name, trace_id, _ in _Collector.spans:
        traces.setdefault(name, set()).add(trace_id)
    assert "lakesync.shipment" in traces, sorted(traces)
    (push_trace,) = traces["lakesync.push"]
    for name in ("lakesync.hotlog.append", "lakesync.flush", "lakesync.pipeline.run",
                 "lakesync.shipment"):
        assert push_trace in traces.get(name, set()), f"{name} is not in the push's trace"
