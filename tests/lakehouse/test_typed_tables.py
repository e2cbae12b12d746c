"""Typed columns in the lake: ``analytics.<table>`` carries the Spark/Iceberg types (bigint,
decimal(p,s), timestamp, date, binary), ``lakesync query`` and fresh reads return the Python
values, and a widened column (integer → decimal → number, any type → string) rebuilds its model
in full in the new type, keeping every value."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from lakesync.column_types import decode_value
from lakesync.config import Config, GatewayConfig
from lakesync.delta import RowDelta
from lakesync.destination_specs import DestinationSpec
from lakesync.destinations.factory import open_destination
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.models import mismatched_columns
from lakesync.lakehouse.query import run_query
from lakesync.lakehouse.registry import publish_schemas
from lakesync.lakehouse.runner import run_pipeline
from lakesync.lakehouse.shipping import ship
from lakesync.schema import TableSchema, parse_schema
from tests.api.helpers import now_hlc
from tests.destinations.conftest import BIGQUERY_ENDPOINT, require_bigquery
from tests.lakehouse.conftest import Lake, append_in_order, make_lake
from tests.lakehouse.test_shipping import databases

__all__ = ["databases"]  # a fixture of test_shipping, used here

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

TYPED = parse_schema({"table": "ledger", "columns": [
    {"name": "id", "type": "integer"},
    {"name": "amount", "type": "decimal", "precision": 38, "scale": 9},
    {"name": "price", "type": "decimal", "precision": 10, "scale": 2},
    {"name": "at", "type": "timestamp"},
    {"name": "day", "type": "date"},
    {"name": "blob", "type": "bytes"},
    {"name": "score", "type": "number"},
]})
SPARK_TYPES = {"id": "bigint", "amount": "decimal(38,9)", "price": "decimal(10,2)",
               "at": "timestamp", "day": "date", "blob": "binary", "score": "double"}
ROWS: dict[str, dict[str, Any]] = {
    "big": {"id": "4611686018427387905", "amount": "12345678901234567890123456789.123456789",
            "price": "12.50", "at": "1969-12-31T23:59:59.999999Z", "day": "1969-07-20",
            "blob": "AGEAAA==", "score": 0.5},
    "low": {"id": "-9223372036854775808", "amount": "-0.000000001", "price": "0.00",
            "at": "1900-01-01T00:00:00.000001Z", "day": "1900-02-28", "blob": ""},
    "safe": {"id": 42, "at": "2024-02-29T12:34:56.000001Z", "day": "2000-02-29"},
}


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    lk = make_lake(Path(tmp_path_factory.mktemp("typed")))
    yield lk
    lk.spark.stop()
    lk.log.close()


def _insert(table: str, row: str, hlc: int, cells: dict[str, Any]) -> RowDelta:
    return RowDelta.create("INSERT", table, row, "c1", cells, hlc)


def _python(schema: TableSchema, cells: dict[str, Any]) -> tuple[Any, ...]:
    """A row's cells as ``lakesync query`` returns them: each column's Python value."""
    out = []
    for spec in schema.columns:
        value = decode_value(spec, cells.get(spec.name))
        out.append(float(value) if spec.type == "number" and value is not None else value)
    return tuple(out)


def _select(schema: TableSchema, gw: str) -> str:
    names = ", ".join(f'"{c.name}"' for c in schema.columns)
    return (f"select row_id, {names} from analytics.{schema.table} where gateway_id = '{gw}' "
            "order by row_id")


def _described(lake: Lake, table: str) -> dict[str, str]:
    return {r["col_name"]: r["data_type"] for r in lake.rows(f"describe table analytics.{table}")
            if r["col_name"] and not r["col_name"].startswith("#")}


def test_analytics_tables_carry_the_spark_types_and_queries_return_python_values(
    lake: Lake,
) -> None:
    gw = "gwtyped"
    publish_schemas(open_catalog(lake.settings), [(gw, TYPED)])
    t = now_hlc()
    lake.land(gw, [_insert("ledger", r, t + i, c) for i, (r, c) in enumerate(ROWS.items())])
    run_pipeline(settings=lake.settings, schemas=[TYPED], tests=False)

    described = _described(lake, "ledger")
    assert {n: described[n] for n in SPARK_TYPES} == SPARK_TYPES
    # Spark's own values, exact: micros since the epoch for the instants.
    spark = {r["row_id"]: r for r in lake.rows(
        "select row_id, id, amount, unix_micros(at) as at_us, day, blob from analytics.ledger "
        f"where gateway_id = '{gw}'")}
    assert spark["big"]["id"] == 2**62 + 1
    assert spark["big"]["amount"] == Decimal("12345678901234567890123456789.123456789")
    assert spark["big"]["at_us"] == -1
    assert bytes(spark["big"]["blob"]) == b"\x00a\x00\x00"
    assert spark["low"]["id"] == -(2**63) and bytes(spark["low"]["blob"]) == b""

    expected = [(r, *_python(TYPED, ROWS[r])) for r in sorted(ROWS)]
    result = run_query(lake.settings, _select(TYPED, gw))
    assert result.rows == expected
    for got, want in zip(result.rows, expected, strict=True):
        assert [type(v) for v in got] == [type(v) for v in want]
    assert result.rows[0][4].tzinfo is not None  # an instant: aware, in UTC

    # A fresh read returns the typed values of a delta the pipeline has not merged yet.
    later = {"id": "9223372036854775807", "amount": "1.000000000", "price": "99999999.99",
             "at": "9999-12-31T23:59:59.999999Z", "day": "0001-01-01", "blob": "/w=="}
    append_in_order(lake.log, [(gw, _insert("ledger", "later", t + 10, later))])
    fresh = run_query(lake.settings, _select(TYPED, gw), fresh=True, hot_log=lake.log).rows
    assert fresh == sorted([*expected, ("later", *_python(TYPED, later))])
    assert fresh[1][4] == datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


NARROW = parse_schema({"table": "widened", "columns": [
    {"name": "id", "type": "integer"},
    {"name": "price", "type": "decimal", "precision": 10, "scale": 2},
    {"name": "code", "type": "integer"},
    {"name": "at", "type": "timestamp"},
    {"name": "ok", "type": "boolean"},
]})
WIDE = parse_schema({"table": "widened", "columns": [
    {"name": "id", "type": "decimal", "precision": 38, "scale": 9},
    {"name": "price", "type": "number"},
    {"name": "code", "type": "string"},
    {"name": "at", "type": "string"},
    {"name": "ok", "type": "string"},
]})


def test_a_widened_column_is_rebuilt_in_its_new_type_keeping_every_value(lake: Lake) -> None:
    gw = "gwwiden"
    publish_schemas(open_catalog(lake.settings), [(gw, NARROW)])
    t = now_hlc()
    lake.land(gw, [
        _insert("widened", "a", t + 1, {"id": "4611686018427387905", "price": "12.50",
                                        "code": 7, "at": "1969-12-31T23:59:59.999999Z",
                                        "ok": True}),
        _insert("widened", "b", t + 2, {"id": -5, "price": "-0.01", "code": "-9007199254740993"}),
    ])
    run_pipeline(settings=lake.settings, schemas=[NARROW], tests=False)
    assert _described(lake, "widened")["id"] == "bigint"

    publish_schemas(open_catalog(lake.settings), [(gw, WIDE)])
    lake.land(gw, [_insert("widened", "c", t + 3, {"id": "0.500000000", "price": 1.25,
                                                   "code": "x", "at": "now", "ok": "yes"})])
    run_pipeline(settings=lake.settings, schemas=[WIDE], tests=False)
    described = _described(lake, "widened")
    assert {n: described[n] for n in ("id", "price", "code", "at", "ok")} == {
        "id": "decimal(38,9)", "price": "double", "code": "string", "at": "string",
        "ok": "string"}
    assert run_query(lake.settings, _select(WIDE, gw)).rows == [
        ("a", Decimal("4611686018427387905.000000000"), 12.5, "7",
         "1969-12-31T23:59:59.999999Z", "true"),
        ("b", Decimal("-5.000000000"), -0.01, "-9007199254740993", None, None),
        ("c", Decimal("0.500000000"), 1.25, "x", "now", "yes"),
    ]


UNCHANGED: list[dict[str, Any]] = [  # every other type: built as the schema says, no rebuild
    {"name": "at", "type": "timestamp"}, {"name": "day", "type": "date"},
    {"name": "x", "type": "number"}, {"name": "ok", "type": "boolean"},
    {"name": "j", "type": "json"},
]
DECLARED = parse_schema({"table": "retyped", "columns": [
    {"name": "n", "type": "integer"}, {"name": "b", "type": "bytes"},
    {"name": "c", "type": "bytes"}, *UNCHANGED,
]})
RETYPED = parse_schema({"table": "retyped", "columns": [
    {"name": "n", "type": "decimal", "precision": 21, "scale": 2}, {"name": "b", "type": "string"},
    {"name": "c", "type": "bytes"}, *UNCHANGED,
]})
RETYPED_AGAIN = parse_schema({"table": "retyped", "columns": [
    {"name": "n", "type": "decimal", "precision": 21, "scale": 2}, {"name": "b", "type": "string"},
    {"name": "c", "type": "string"}, *UNCHANGED,
]})


def test_a_column_widened_through_the_admin_api_rebuilds_its_table_by_itself(lake: Lake) -> None:
    """The schema the gateway published (widened through the admin API) wins over the stale
    ``lakesync.yaml``, and the pipeline rebuilds the retyped table in full by itself, however
    its model file changed: no refused table, no failed model, no ``--full-refresh`` by hand."""
    gw = "gwretype"
    stale = Config(data_dir=lake.settings.data_dir, jwt_secrets=[],
                   gateways={gw: GatewayConfig(gw, [DECLARED])})
    catalog = open_catalog(lake.settings)
    publish_schemas(catalog, [(gw, DECLARED)])
    t = now_hlc()
    lake.land(gw, [_insert("retyped", "a", t + 1, {"n": 7, "b": "AGE=", "c": "/w=="})])
    assert run_pipeline(settings=lake.settings, config=stale, tests=False).failed == {}
    assert _described(lake, "retyped")["b"] == "binary"

    publish_schemas(catalog, [(gw, RETYPED)])  # the admin API widened n and b
    lake.land(gw, [_insert("retyped", "b", t + 2, {"n": "5000000000.00", "b": "text"})])
    result = run_pipeline(settings=lake.settings, config=stale, tests=True)
    assert result.failed == {} and result.failed_change_sets == {}
    described = _described(lake, "retyped")
    assert (described["n"], described["b"], described["c"]) == (
        "decimal(21,2)", "string", "binary")

    # A model file the pipeline lost meanwhile (a table refused once, a new data dir) is no
    # different: the built table's own types tell the pipeline it must rebuild.
    publish_schemas(catalog, [(gw, RETYPED_AGAIN)])
    generated = lake.settings.dbt_run_project_dir / "generated" / "analytics"
    (generated / "analytics__retyped.sql").unlink()
    lake.land(gw, [_insert("retyped", "c", t + 3, {"c": "plain"})])
    result = run_pipeline(settings=lake.settings, config=stale, tests=True)
    assert result.failed == {}
    assert _described(lake, "retyped")["c"] == "string"
    assert [r[:4] for r in run_query(lake.settings, _select(RETYPED_AGAIN, gw)).rows] == [
        ("a", Decimal("7.00"), "AGE=", "/w=="),
        ("b", Decimal("5000000000.00"), "text", None),
        ("c", None, None, "plain"),
    ]
    # Rebuilt once: the built table now holds every column as the schema types it.
    fields = catalog.load_table("analytics.retyped").schema().fields
    built = {f.name: str(f.field_type) for f in fields}
    assert mismatched_columns(RETYPED_AGAIN.columns, built) == [], built


def test_typed_change_sets_ship_exactly_to_every_destination(
    lake: Lake, databases: tuple[str, str]
) -> None:
    """The pipeline's change sets of a typed table, shipped from Spark (JDBC into PostgreSQL
    and MariaDB staging tables, a JSON load job into BigQuery), land every edge value exactly."""
    pg_url, my_url = databases
    require_bigquery()
    bq_url = f"bigquery://test-project/t_{uuid.uuid4().hex[:12]}?endpoint={BIGQUERY_ENDPOINT}"
    gw = "gwship"
    specs = {
        "pg": DestinationSpec("postgres", pg_url, gw, ["ledger"], "soft", name="pg"),
        "maria": DestinationSpec("mysql", my_url, gw, ["ledger"], "hard", name="maria"),
        "bq": DestinationSpec("bigquery", bq_url, gw, ["ledger"], "soft", name="bq"),
    }
    config = Config(data_dir=lake.settings.data_dir, jwt_secrets=[],
                    gateways={gw: GatewayConfig(gw, [TYPED])}, destinations=specs)
    t = now_hlc()
    lake.land(gw, [_insert("ledger", r, t + i, c) for i, (r, c) in enumerate(ROWS.items())])
    run_pipeline(settings=lake.settings, schemas=[TYPED], tests=False, config=config)
    results = {r.destination: r for r in ship(lake.settings, config, spark=lake.spark)}
    assert all(r.error is None and r.rows == len(ROWS) for r in results.values()), results
    for spec in specs.values():
        with open_destination(spec, env={}) as dest:
            rows = dest.read_rows(dest.layout("ledger", TYPED.columns))
        got = {r["row_id"]: tuple(r[c.name] for c in TYPED.columns) for r in rows}
        assert got == {r: _python(TYPED, c) for r, c in ROWS.items()}, spec.name
