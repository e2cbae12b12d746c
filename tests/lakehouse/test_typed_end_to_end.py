"""Acceptance: typed data end to end, on real servers.

A PostgreSQL source table with every common type (2^62 + 1, numeric(38,9) with every digit,
timestamps with microseconds in three time zones, dates before 1970, bytes with NUL) and a
MariaDB one, each polled by its connector in a real ``lakesync up`` process (no hand-written
schema) → the gateway → the gateway's landing flush → dbt on Spark → PostgreSQL, MariaDB and
BigQuery destinations. Every destination column has the mapped type and every value equals the
source's; ``analytics.<table>`` has the mapped Spark/Iceberg types and the same values; a Python
client syncing from the gateway reads the same Python values; ``pull?source=`` of each
destination returns the canonical wire values the gateway holds.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
import yaml

from lakesync.client import LakeSyncClient
from lakesync.config import load_config
from lakesync.connectors.database import MysqlDialect, PostgresDialect
from lakesync.lakehouse.runner import run_pipeline
from lakesync.lakehouse.settings import LakeSettings
from lakesync.lakehouse.shipping import ship
from lakesync.lakehouse.spark import spark_session
from lakesync.schema import parse_schema
from tests.api.helpers import auth, token
from tests.conftest import PG_DSN, require_postgres
from tests.connectors.conftest import MYSQL_DSN, require_mysql
from tests.connectors.test_source_types import (
    BIG,
    DIGITS,
    MYSQL_ROW,
    MYSQL_SCHEMA,
    MYSQL_TABLE,
    PG_EXPECTED,
    PG_ROWS,
    PG_SCHEMA,
    PG_TABLE,
)
from tests.gateway_process import ServerProcess
from tests.lakehouse.typed_destinations import (
    analytics_rows,
    bq_rows,
    maria,
    maria_rows,
    pg_rows,
    pg_types,
    pull_cells,
    same_values,
)

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

GW = "gw_typed"
UTC = dt.UTC
MIN = -(2**63)

# The source's values as Python holds them (the typed columns of two PostgreSQL rows).
PG_PY = {
    str(BIG): {
        "id": BIG, "small": -32768, "i": -2147483648, "amount": Decimal(DIGITS),
        "bare": Decimal("1.5"), "r": 1.25, "d": 2.5, "b": True, "tx": "it's",
        "day": dt.date(1969, 7, 20),
        "naive": dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
        "at": dt.datetime(2024, 1, 1, 21, 34, 5, 123456, tzinfo=UTC),  # +05:30 at the source
        "blob": b"\x00\xff\x00",
    },
    str(MIN): {
        "id": MIN, "small": 0, "i": 0, "amount": Decimal("-0.000000001"), "bare": Decimal(0),
        "r": 0.0, "d": 0.0, "b": False, "tx": "", "day": dt.date(1, 1, 1),
        "naive": dt.datetime(1900, 1, 1, tzinfo=UTC),
        "at": dt.datetime(1950, 7, 1, 7, 59, 59, 999999, tzinfo=UTC),  # -08:00 at the source
        "blob": b"",
    },
    "3": {"id": 3, "at": dt.datetime(2024, 6, 1, 12, 0, 0, 1, tzinfo=UTC), "blob": None},
}
MY_PY = {
    str(BIG): {
        "id": BIG, "small": -32768, "big_u": Decimal(2**64 - 1), "amount": Decimal(DIGITS),
        "f": 2.5, "b": True, "tx": "it's", "day": dt.date(1969, 7, 20),
        "naive": dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
        "at": dt.datetime(2024, 1, 1, 21, 34, 5, 123456, tzinfo=UTC),
        "bin": b"\x00\xff\x00", "yr": 1999,
    },
}
SPARK_TYPES = {
    "id": "bigint", "small": "bigint", "i": "bigint", "amount": "decimal(38,9)",
    "bare": "decimal(38,9)", "r": "double", "d": "double", "b": "boolean", "tx": "string",
    "day": "date", "naive": "timestamp", "at": "timestamp", "jb": "string", "blob": "binary",
}
PG_DEST_TYPES = {
    "id": "bigint", "amount": "numeric(38,9)", "r": "double precision", "b": "boolean",
    "tx": "text", "day": "date", "at": "timestamp with time zone", "blob": "bytea",
}
MARIA_DEST_TYPES = {
    "id": "bigint(20)", "amount": "decimal(38,9)", "r": "double", "b": "tinyint(1)",
    "day": "date", "at": "datetime(6)", "blob": "longblob",
}
BQ_DEST_TYPES = {
    "id": "INTEGER", "amount": "NUMERIC", "r": "FLOAT", "b": "BOOLEAN", "tx": "STRING",
    "day": "DATE", "at": "TIMESTAMP", "blob": "BYTES",
}


@pytest.fixture(scope="module")
def sources() -> Iterator[tuple[str, str]]:
    """The PostgreSQL and MariaDB source tables, filled."""
    require_postgres()
    require_mysql()
    name = f"typed_{uuid.uuid4().hex[:8]}"
    pg = PostgresDialect().connect(PG_DSN)
    pg.autocommit = True
    pg.execute(f"CREATE TYPE {name}_mood AS ENUM ('happy', 'sad')")
    pg.execute(PG_TABLE.format(t=name))
    pg.execute(f"INSERT INTO {name} VALUES {', '.join(PG_ROWS)}")
    my = MysqlDialect().connect(MYSQL_DSN)
    my.autocommit(True)
    with my.cursor() as cur:
        cur.execute(MYSQL_TABLE.format(t=name))
        cur.execute("SET time_zone = '+05:30'")
        cur.execute(MYSQL_ROW.format(t=name), (BIG, DIGITS))
    try:
        yield name, name
    finally:
        pg.execute(f"DROP TABLE {name}")
        pg.execute(f"DROP TYPE {name}_mood")
        pg.close()
        with my.cursor() as cur:
            cur.execute(f"DROP TABLE {name}")
        my.close()


def _admin(server: ServerProcess) -> dict[str, str]:
    return auth(token("ops", GW, "admin"))


def _wait_polled(server: ServerProcess, names: list[str], deadline: float = 180) -> None:
    end = time.monotonic() + deadline
    pending = set(names)
    while pending and time.monotonic() < end:
        for name in list(pending):
            r = httpx.get(f"{server.url}/v1/admin/connectors/{GW}/{name}/status",
                          headers=_admin(server), timeout=30)
            status = r.json() if r.status_code == 200 else {}
            if status.get("last_error"):
                raise AssertionError(f"connector {name}: {status['last_error']}")
            if status.get("last_success"):
                pending.discard(name)
        time.sleep(0.5)
    assert not pending, f"connectors {pending} did not finish a poll"


def test_typed_rows_arrive_equal_everywhere(
    sources: tuple[str, str],
    destinations: dict[str, str],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    pg_table, my_table = sources
    data = tmp_path / "data"
    config = tmp_path / "lakesync.yaml"
    config.write_text(yaml.safe_dump({
        "connectors": {
            "pgsrc": {"kind": "postgres", "gateway": GW, "dsn": PG_DSN, "interval": 3600,
                      "source_table": pg_table, "table": "pg_typed", "key": ["id"],
                      "strategy": "diff"},
            "mysrc": {"kind": "mysql", "gateway": GW, "dsn": MYSQL_DSN, "interval": 3600,
                      "source_table": my_table, "table": "my_typed", "key": ["id"],
                      "strategy": "diff"},
        },
        "destinations": {
            name: {"kind": {"pg": "postgres", "maria": "mysql", "bq": "bigquery"}[name],
                   "url": url, "gateway": GW}
            for name, url in destinations.items()
        },
    }), encoding="utf-8")
    with ServerProcess(data, config=config) as server:
        _wait_polled(server, ["pgsrc", "mysrc"])
        held, _ = pull_cells(server.url, GW)  # what the gateway holds: the canonical wire values
        for row_id, want in PG_EXPECTED.items():
            assert {k: held[f"pg_typed/{row_id}"].get(k) for k in want} == want, row_id

        r = httpx.post(f"{server.url}/v1/admin/flush/{GW}", headers=_admin(server), timeout=120)
        assert r.status_code == 200, r.text
        settings = LakeSettings.from_env(data, env={})
        loaded = load_config(config, env={})
        # This lake's session (bound to its catalog) must not outlive the test: later tests in
        # the process build their own.
        spark = spark_session(settings)
        request.addfinalizer(spark.stop)
        run_pipeline(settings=settings, config=loaded, tests=True)
        results = ship(settings, loaded, spark=spark)
        assert all(r.error is None for r in results), results

        # analytics.<table>: the mapped Spark/Iceberg types and the source's values
        fields = {f.name: f.dataType.simpleString()
                  for f in spark.table("analytics.pg_typed").schema.fields}
        assert {k: fields[k] for k in SPARK_TYPES} == SPARK_TYPES
        lake = analytics_rows(spark, "pg_typed", GW)
        for row_id, want in PG_PY.items():
            got = lake[row_id]
            same_values(got, want, "analytics")

        # PostgreSQL, MariaDB and BigQuery destinations: mapped types, equal values
        pg_dest = pg_types(destinations["pg"], "pg_typed")
        assert {k: pg_dest[k] for k in PG_DEST_TYPES} == PG_DEST_TYPES
        maria_types = {r["n"]: r["t"] for r in maria(
            destinations["maria"], "select column_name as n, column_type as t from"
            " information_schema.columns where table_schema = database()"
            " and table_name = 'pg_typed'")}
        assert {k: maria_types[k] for k in MARIA_DEST_TYPES} == MARIA_DEST_TYPES
        bq_shipped, bq_types = bq_rows(destinations["bq"], "pg_typed")
        assert {k: bq_types[k] for k in BQ_DEST_TYPES} == BQ_DEST_TYPES
        shipped = {
            "pg": pg_rows(destinations["pg"], "pg_typed"),
            "maria": maria_rows(destinations["maria"], "pg_typed", ["b"]),
            "bq": bq_shipped,
        }
        for dest, rows in shipped.items():
            for row_id, want in PG_PY.items():
                got = {k: bytes(v) if isinstance(v, memoryview) else v
                       for k, v in rows[row_id].items()}
                same_values(got, want, dest)
        for row_id, want in MY_PY.items():
            same_values(pg_rows(destinations["pg"], "my_typed")[row_id], want, "pg from mysql")
            same_values(maria_rows(destinations["maria"], "my_typed", ["b"])[row_id], want,
                  "maria from mysql")
            same_values(bq_rows(destinations["bq"], "my_typed")[0][row_id], want, "bq from mysql")

        # pull?source= of each destination: the values the gateway holds
        for dest in destinations:
            back, _ = pull_cells(server.url, GW, source=dest)
            for key, cells in held.items():
                got = {k: v for k, v in back[key].items() if k in cells}
                assert got == cells, (dest, key)

        # A Python client syncing from the gateway reads the source's Python values
        schemas = [parse_schema(PG_SCHEMA | {"table": "pg_typed"}),
                   parse_schema(MYSQL_SCHEMA | {"table": "my_typed"})]
        with LakeSyncClient(":memory:", url=server.url, gateway_id=GW,
                            token=token("reader", GW), schemas=schemas) as client:
            client.sync()
            for row_id, want in PG_PY.items():
                same_values(client.get("pg_typed", row_id) or {}, want, "client")
            for row_id, want in MY_PY.items():
                same_values(client.get("my_typed", row_id) or {}, want, "client from mysql")

