"""`lakesync query`'s quick way: views of only the tables a plain SELECT names, read
straight from the embedded catalog, answer exactly as the general way (every table loaded
through pyiceberg) would, see every commit made since, and start without pyiceberg."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from lakesync.lakehouse.bootstrap import init_catalog_tables
from lakesync.lakehouse.catalog import ensure_landing_table, open_catalog, table_locations
from lakesync.lakehouse.query import connect, quick_query, run_query, statement_tables
from lakesync.lakehouse.settings import LakeSettings
from tests.gateway_process import ROOT

TYPED = pa.schema([
    pa.field("row_id", pa.string(), nullable=False),
    pa.field("n", pa.int64()),
    pa.field("small", pa.int32()),
    pa.field("x", pa.float64()),
    pa.field("f", pa.float32()),
    pa.field("amount", pa.decimal128(10, 3)),
    pa.field("hlc", pa.decimal128(20, 0)),
    pa.field("done", pa.bool_()),
    pa.field("day", pa.date32()),
    pa.field("at", pa.timestamp("us", tz="UTC")),
    pa.field("local", pa.timestamp("us")),
    pa.field("blob", pa.binary()),
    pa.field("tags", pa.list_(pa.string())),
    pa.field("place", pa.struct([pa.field("lat", pa.float64()), pa.field("name", pa.string())])),
])
ROWS: dict[str, list[Any]] = {
    "row_id": ["a", "b", "c"],
    "n": [1, -(2**63), None],
    "small": [7, None, -1],
    "x": [1.5, float("inf"), None],
    "f": [0.25, None, -3.0],
    "amount": [Decimal("12.345"), None, Decimal("-0.001")],
    "hlc": [Decimal(2**64 - 1), Decimal(0), None],
    "done": [True, False, None],
    "day": [date(2026, 11, 26), None, date(1, 1, 1)],
    "at": [datetime(2026, 11, 26, 7, 0, tzinfo=UTC), None, datetime(1970, 1, 1, tzinfo=UTC)],
    "local": [datetime(2026, 11, 26, 7, 0), None, None],
    "blob": [b"\x00\xff", None, b""],
    "tags": [["x", "y"], [], None],
    "place": [{"lat": 52.5, "name": "Berlin"}, None, {"lat": None, "name": "?"}],
}
QUERIES = [
    "select * from analytics.typed order by row_id",
    "select count(*) from analytics.typed",
    "SELECT T.ROW_ID, amount * 2 AS twice FROM Analytics.Typed AS t ORDER BY 1",
    "with picked as (select row_id, hlc from analytics.typed where done) "
    "select p.*, (select count(*) from landing) as landed from picked p",
    "select l.row_id, t.n from lakesync.landing l right join analytics.typed t using (row_id) "
    "order by t.row_id",
    "select * from memory.main.landing",
    "from analytics.typed select row_id, tags, place order by row_id desc",
]


@pytest.fixture
def lake(tmp_path: Path) -> LakeSettings:
    settings = LakeSettings.from_env(tmp_path / "data", env={})
    init_catalog_tables(settings)
    (settings.data_dir / "warehouse").mkdir()
    catalog = open_catalog(settings)
    ensure_landing_table(catalog)
    catalog.create_namespace("analytics")
    catalog.create_table("analytics.typed", schema=TYPED).append(pa.table(ROWS, schema=TYPED))
    return settings


def _general(settings: LakeSettings, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """What the general way (every table loaded through pyiceberg) answers."""
    con = connect(settings)
    try:
        cursor = con.execute(sql)
        return [d[0] for d in cursor.description], [tuple(r) for r in cursor.fetchall()]
    finally:
        con.close()


def _typed(rows: list[tuple[Any, ...]]) -> list[list[tuple[str, str]]]:
    # Equal values of different types (1 == 1.0 == True, Decimal('1') == 1) must not pass.
    return [[(type(v).__name__, repr(v)) for v in row] for row in rows]


@pytest.mark.parametrize("sql", QUERIES)
def test_the_quick_way_answers_exactly_as_the_general_way(lake: LakeSettings, sql: str) -> None:
    quick = quick_query(lake, sql)
    assert quick is not None, "the quick way declined a plain SELECT of lake tables"
    columns, rows = _general(lake, sql)
    assert quick.columns == columns
    assert _typed(quick.rows) == _typed(rows)
    assert run_query(lake, sql) == quick


def test_a_commit_after_a_query_is_seen_by_the_next(lake: LakeSettings) -> None:
    count = "select count(*) as n from analytics.typed"
    assert run_query(lake, count).rows == [(3,)]
    catalog = open_catalog(lake)
    catalog.load_table("analytics.typed").append(pa.table(ROWS, schema=TYPED))
    assert run_query(lake, count).rows == [(6,)]
    # A table created since the last query answers too.
    schema = pa.schema([pa.field("id", pa.string())])
    catalog.create_table("analytics.later", schema=schema).append(pa.table({"id": ["z"]}))
    assert run_query(lake, "select id from analytics.later").rows == [("z",)]


@pytest.mark.parametrize(
    "sql",
    [
        "select * from duckdb_views()",  # a table function: it sees which views exist
        "select table_name from information_schema.tables",
        "describe analytics.typed",
        "show tables",
        "select * from analytics.nope",
        "select * from typed",  # not a lakesync table: unqualified it does not resolve
        "select * from 'file.parquet'",
        "create table t as select 1",
        "selec 1",
    ],
)
def test_anything_else_takes_the_general_way(lake: LakeSettings, sql: str) -> None:
    assert quick_query(lake, sql) is None


def test_the_unknown_table_error_still_lists_the_lake(lake: LakeSettings) -> None:
    with pytest.raises(Exception, match=r"no table nope in the lake; tables: analytics\.typed"):
        run_query(lake, "select * from analytics.nope")


def _tree(sql: str) -> dict[str, Any]:
    literal = sql.replace("'", "''")
    text = duckdb.connect().execute(f"select json_serialize_sql('{literal}')").fetchone()
    assert text is not None
    tree: dict[str, Any] = json.loads(text[0])
    return tree


TABLES = ["analytics.todos", "lakesync.landing", "lakesync.int_rows_merged", "analytics.Mixed"]


@pytest.mark.parametrize(
    ("sql", "named"),
    [
        ("select count(*) from analytics.todos", {"analytics.todos"}),
        ("select 1", set()),
        ("select * from landing, main.int_rows_merged", {"lakesync.landing",
                                                         "lakesync.int_rows_merged"}),
        ("select * from memory.lakesync.landing", {"lakesync.landing"}),
        ("select * from ANALYTICS.TODOS join analytics.mixed using (id)",
         {"analytics.todos", "analytics.Mixed"}),
        ("with todos as (select 1) select * from todos", set()),
        ("with recursive t(n) as (select 1 union all select n + 1 from t where n < 3) "
         "select * from t, analytics.todos", {"analytics.todos"}),
        ("select (select max(id) from analytics.todos) from (values (1)) v(a)",
         {"analytics.todos"}),
        ("select * from todos", None),
        ("select * from other.todos", None),
        ("select * from analytics.todos at (version => 1)", None),
        ("select * from iceberg_scan('x')", None),
        ("summarize analytics.todos", None),
        ("select * from information_schema.tables", None),
        ("insert into t values (1)", None),
    ],
)
def test_statement_tables(sql: str, named: set[str] | None) -> None:
    assert statement_tables(_tree(sql), TABLES) == named


def test_table_locations_are_the_catalogs(lake: LakeSettings) -> None:
    catalog = open_catalog(lake)
    listed = {
        ".".join(ident): catalog.load_table(ident).metadata_location
        for ns in catalog.list_namespaces()
        for ident in catalog.list_tables(ns)
    }
    assert table_locations(lake) == listed


def test_a_plain_query_starts_without_pyiceberg(lake: LakeSettings) -> None:
    # The quick way's point: the CLI loads none of the general way's packages.
    heavy = ["pyiceberg", "sqlalchemy", "pyarrow", "pandas", "lakesync.cli.lake",
             "lakesync.lakehouse.fresh"]
    script = (
        "import sys\n"
        "from lakesync.cli.main import main\n"
        f"code = main(['query', '-f', 'csv', '--data-dir', {str(lake.data_dir)!r},"
        " 'select count(*) as n from analytics.typed'])\n"
        f"print(code, sorted(m for m in {heavy!r} if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("LAKESYNC_CONFIG", None)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["n", "3", "0 []"]
