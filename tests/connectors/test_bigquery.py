"""The BigQuery source against the BigQuery emulator (``local-bigquery``, started by
scripts/services.sh): types, the cursor and diff strategies, a query instead of a table, paging
and the memory bound.

The emulator answers a statement in about a second: every case here is slow.
"""

from __future__ import annotations

import asyncio
import contextlib
import tracemalloc
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from lakesync.connector_specs import BigQuerySpec, parse_connector
from lakesync.connectors import open_source
from lakesync.connectors.bigquery import bigquery_client, bigquery_type, bigquery_value
from lakesync.connectors.database import DatabaseSource
from tests.connectors.conftest import GatewayUnderTest
from tests.destinations.conftest import BIGQUERY_ENDPOINT, require_bigquery

pytestmark = pytest.mark.slow

PROJECT = "test-project"


class Dataset:
    """A fresh dataset on the emulator, and SQL run in it."""

    def __init__(self) -> None:
        require_bigquery()
        self.url = f"bigquery://{PROJECT}?endpoint={BIGQUERY_ENDPOINT}"
        self.client = bigquery_client(self.url)
        self.name = f"ls_src_{uuid.uuid4().hex[:10]}"
        self.run(f"CREATE SCHEMA {self.name}")

    def run(self, sql: str) -> list[dict[str, Any]]:
        return [dict(r.items()) for r in self.client.query(sql).result()]

    def spec(self, **body: Any) -> BigQuerySpec:
        base = {"kind": "bigquery", "gateway": "gw1", "url": self.url, "table": "ledger"}
        spec = parse_connector("bq1", base | {"key": ["id"]} | body)
        assert isinstance(spec, BigQuerySpec)
        return spec

    def drop(self) -> None:
        with contextlib.suppress(Exception):
            self.run(f"DROP SCHEMA {self.name} CASCADE")
        self.client.close()


@pytest.fixture
def dataset() -> Iterator[Dataset]:
    ds = Dataset()
    yield ds
    ds.drop()


def ledger(ds: Dataset, rows: int, start: int = 1) -> None:
    """``rows`` ledger rows (ids from ``start``), one second apart from 2026-01-01."""
    ds.run(
        f"INSERT INTO {ds.name}.ledger (id, cost_centre, amount, booked_at)"
        " SELECT x, IF(MOD(x, 2) = 0, 'ops', 'sales'), CAST(x AS NUMERIC) / 4,"
        " TIMESTAMP_ADD(TIMESTAMP '2026-01-01 00:00:00+00', INTERVAL x SECOND)"
        f" FROM UNNEST(GENERATE_ARRAY({start}, {start + rows - 1})) AS x"
    )


@pytest.fixture
def ledger_table(dataset: Dataset) -> Dataset:
    dataset.run(
        f"CREATE TABLE {dataset.name}.ledger (id INT64, cost_centre STRING,"
        " amount NUMERIC(12, 2), booked_at TIMESTAMP)"
    )
    return dataset


def test_the_type_table_maps_to_the_typed_columns() -> None:
    assert bigquery_type("INTEGER") == bigquery_type("INT64") == "integer"
    assert bigquery_type("FLOAT") == "number"
    assert bigquery_type("NUMERIC", precision=12, scale=2) == bigquery_type("NUMERIC") == "decimal"
    assert bigquery_type("BIGNUMERIC", precision=40) == "string"  # beyond 38 digits: exact text
    assert bigquery_type("TIMESTAMP") == bigquery_type("DATETIME") == "timestamp"
    assert bigquery_type("BYTES") == "bytes" and bigquery_type("DATE") == "date"
    assert bigquery_type("JSON") == bigquery_type("RECORD") == "json"
    assert bigquery_type("STRING", "REPEATED") == "json"
    import decimal

    assert bigquery_value(decimal.Decimal("12.25"), "number") == 12.25
    big = decimal.Decimal("123456789012345678901234.5")
    assert bigquery_value(big, "string") == "123456789012345678901234.5"
    assert bigquery_value({"a": big, "b": decimal.Decimal("0.5")}, "json") == {
        "a": "123456789012345678901234.5",
        "b": 0.5,
    }
    assert bigquery_value(b"\x00\x01", "string") == "AAE="


def test_every_bigquery_type_lands_typed(gateway: GatewayUnderTest, dataset: Dataset) -> None:
    dataset.run(
        f"CREATE TABLE {dataset.name}.t (id INT64, amt NUMERIC(12, 2), big NUMERIC,"
        " f FLOAT64, b BOOL, s STRING, d DATE, dt DATETIME, ts TIMESTAMP, j JSON, by BYTES,"
        " tags ARRAY<STRING>, st STRUCT<a INT64, b STRING>)"
    )
    dataset.run(
        f"INSERT INTO {dataset.name}.t VALUES (1, 12.34, 12345678901234567890, 2.5, true,"
        " 'x', DATE '2026-01-02', DATETIME '2026-01-02 03:04:05',"
        " TIMESTAMP '2026-01-02 03:04:05.123+00', JSON '{\"a\": [1, 2]}', b'\\x00\\x01',"
        " ['a', 'b'], STRUCT(1 AS a, 'q' AS b))"
    )
    source = open_source(dataset.spec(source_table=f"{dataset.name}.t", strategy="diff"))
    assert gateway.poll(source) == 1
    schema = asyncio.run(gateway.service.schemas("gw1"))["ledger"]
    assert schema.column_types() == {
        "id": "integer",
        "amt": "decimal",
        "big": "decimal",
        "f": "number",
        "b": "boolean",
        "s": "string",
        "d": "date",
        "dt": "timestamp",
        "ts": "timestamp",
        "j": "json",
        "by": "bytes",
        "tags": "json",
        "st": "json",
    }
    specs = schema.column_specs()
    assert (specs["amt"].precision, specs["amt"].scale) == (12, 2)
    assert (specs["big"].precision, specs["big"].scale) == (38, 9)
    row = gateway.rows("ledger")["1"]
    assert row["id"] == 1 and row["amt"] == "12.34" and row["f"] == 2.5 and row["b"] is True
    assert row["big"] == "12345678901234567890.000000000"
    assert (row["d"], row["dt"]) == ("2026-01-02", "2026-01-02T03:04:05.000000Z")
    assert row["ts"] == "2026-01-02T03:04:05.123000Z"
    assert row["j"] == {"a": [1, 2]} and row["by"] == "AAE="
    assert row["tags"] == ["a", "b"] and row["st"] == {"a": 1, "b": "q"}


def test_cursor_with_lookback_finds_late_rows_and_stores_nothing_twice(
    gateway: GatewayUnderTest, ledger_table: Dataset
) -> None:
    ds = ledger_table
    ledger(ds, 30)
    spec = ds.spec(source_table=f"{ds.name}.ledger", cursor_column="booked_at", lookback=60)
    assert gateway.poll(open_source(spec)) == 30
    cursor = gateway.store.list_docs("gw1", "connector-cursor")["conn1"]["cursor"]
    assert cursor == {"cursor": {"time": "2026-01-01T00:00:30+00:00"}}
    # A row committed late with an earlier time (within the lookback), and a new one.
    ds.run(
        f"INSERT INTO {ds.name}.ledger VALUES"
        " (100, 'ops', 1.5, TIMESTAMP '2026-01-01 00:00:05+00'),"
        " (101, 'ops', 2.5, TIMESTAMP '2026-01-01 00:01:00+00')"
    )
    assert gateway.poll(open_source(spec)) == 2  # the overlap re-read stores nothing again
    assert gateway.poll(open_source(spec)) == 0
    rows = gateway.rows("ledger")
    assert len(rows) == 32 and rows["100"]["amount"] == "1.50"
    assert len(gateway.log()) == 32


def test_diff_mirrors_updates_and_deletes(gateway: GatewayUnderTest, ledger_table: Dataset) -> None:
    ds = ledger_table
    ledger(ds, 20)
    spec = ds.spec(source_table=f"{ds.name}.ledger", strategy="diff", chunk_rows=7)
    assert gateway.poll(open_source(spec)) == 20
    ds.run(f"DELETE FROM {ds.name}.ledger WHERE id <= 5")
    ds.run(f"UPDATE {ds.name}.ledger SET amount = 99 WHERE id = 10")
    assert gateway.poll(open_source(spec)) == 6  # 5 deletes, 1 update
    rows = gateway.rows("ledger")
    assert sorted(rows, key=int) == [str(i) for i in range(6, 21)]
    assert rows["10"]["amount"] == "99.00"


def test_a_query_reads_a_slice_in_pages_of_chunk_rows(
    gateway: GatewayUnderTest, ledger_table: Dataset
) -> None:
    ds = ledger_table
    ledger(ds, 45)
    query = f"SELECT id, amount, booked_at FROM {ds.name}.ledger WHERE cost_centre = 'ops'"
    spec = ds.spec(query=query, cursor_column="id", chunk_rows=5)
    source = open_source(spec)
    assert isinstance(source, DatabaseSource)

    async def chunks() -> list[int]:
        await source.schemas()
        sizes = [len(c.upserts) async for c in source.poll({})]
        await source.aclose()
        return sizes

    assert asyncio.run(chunks()) == [5, 5, 5, 5, 2]
    assert gateway.poll(open_source(spec)) == 22
    assert set(gateway.rows("ledger")["2"]) == {"id", "amount", "booked_at"}


def test_a_4000_row_diff_holds_one_page(gateway: GatewayUnderTest, ledger_table: Dataset) -> None:
    """Memory: one page of ``chunk_rows`` rows, whatever the table's size (the tracemalloc
    bound of tests/connectors/test_memory.py)."""
    from tests.connectors.test_memory import CONSTANT, peak_of_poll

    ds = ledger_table
    ledger(ds, 4000)
    spec = ds.spec(source_table=f"{ds.name}.ledger", strategy="diff", chunk_rows=200)
    peak = peak_of_poll(gateway, open_source(spec), "bq1")
    assert len(gateway.rows("ledger")) == 4000
    print(f"bigquery diff of 4,000 rows, chunk_rows=200: peak {peak / 2**20:.2f} MiB")
    assert peak < CONSTANT
    # The same table read in one page holds more: the bound is the paging.
    tracemalloc.start()
    try:
        client = bigquery_client(ds.url)
        rows = list(client.query(f"SELECT * FROM {ds.name}.ledger").result(page_size=4000))
        whole = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    print(f"the same rows in one page: {whole / 2**20:.2f} MiB")
    assert len(rows) == 4000 and whole > peak
