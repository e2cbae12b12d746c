"""Acceptance (issue 25): a push read from the OpenTelemetry export through to its shipment is one
trace. In one process, with the SDK's in-memory span exporter: the gateway app takes a push, the
landing flush lands it, :func:`~lakesync.lakehouse.pipeline.run_and_ship` builds the models on
Spark and ships the change set to PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from litestar.testing import TestClient
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from lakesync.api.app import create_app
from lakesync.api.store.sqlite import SqliteHotLog
from lakesync.config import Config, GatewayConfig
from lakesync.destination_specs import DestinationSpec
from lakesync.hlc import HLC
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.pipeline import run_and_ship
from lakesync.schema import parse_schema
from tests.api.helpers import Gateway, delta, make_settings, token
from tests.conftest import drop_pg_database, fresh_pg_database
from tests.otel import by_name, spans

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
