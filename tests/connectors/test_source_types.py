"""Source column types: the mapping tables, the values' Python forms, and every common type of a
real PostgreSQL and MariaDB table arriving in the gateway as its declared type and canonical
wire value."""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import logging
import uuid
from typing import Any

import pytest

from lakesync.connector_specs import parse_connector
from lakesync.connectors import open_source
from lakesync.connectors._decoding import parse_array, typed
from lakesync.connectors._types import SourceColumn, map_column
from lakesync.connectors._values import fit_value
from lakesync.connectors.database import MysqlDialect, PostgresDialect
from lakesync.schema import parse_schema
from tests.conftest import PG_DSN, require_postgres
from tests.connectors.conftest import MYSQL_DSN, GatewayUnderTest, require_mysql

BIG = 2**62 + 1
DIGITS = "12345678901234567890123456789.123456789"  # numeric(38,9), every digit used


def _pg(name: str, data_type: str, **kw: Any) -> dict[str, Any]:
    return map_column(SourceColumn("postgres", name, data_type, **kw))[0]


def test_postgres_types_map_to_declared_columns() -> None:
    assert _pg("a", "bigint") == {"name": "a", "type": "integer"}
    assert _pg("a", "numeric", precision=12, scale=2) == {
        "name": "a", "type": "decimal", "precision": 12, "scale": 2
    }
    assert _pg("a", "numeric") == {"name": "a", "type": "decimal", "precision": 38, "scale": 9}
    assert _pg("a", "timestamp with time zone")["type"] == "timestamp"
    assert _pg("a", "timestamp without time zone")["type"] == "timestamp"
    assert _pg("a", "date")["type"] == "date"
    assert _pg("a", "bytea")["type"] == "bytes"
    assert _pg("a", "jsonb")["type"] == _pg("a", "ARRAY", detail="_int4")["type"] == "json"
    assert _pg("a", "USER-DEFINED", detail="mood", enum=True)["type"] == "string"
    assert _pg("a", "uuid")["type"] == _pg("a", "time without time zone")["type"] == "string"


def test_an_unmapped_type_is_a_string_with_a_warning_naming_the_column() -> None:
    spec, warning = map_column(SourceColumn("postgres", "span", "interval", "interval"))
    assert spec == {"name": "span", "type": "string"}
    assert warning is not None and "'span'" in warning and "interval" in warning
    spec, warning = map_column(SourceColumn("postgres", "huge", "numeric", "numeric", 50, 2))
    assert spec["type"] == "string" and warning is not None and "'huge'" in warning


def test_mysql_and_bigquery_types_map_to_declared_columns() -> None:
    def my(data_type: str, detail: str = "", **kw: Any) -> dict[str, Any]:
        return map_column(SourceColumn("mysql", "a", data_type, detail, **kw))[0]

    assert my("tinyint", "tinyint(1)")["type"] == "boolean"
    assert my("bigint", "bigint(20)")["type"] == "integer"
    assert my("bigint", "bigint(20) unsigned") == {
        "name": "a", "type": "decimal", "precision": 20, "scale": 0
    }
    assert my("decimal", "decimal(38,9)", precision=38, scale=9)["scale"] == 9
    assert my("datetime")["type"] == my("timestamp")["type"] == "timestamp"
    assert my("longblob")["type"] == "bytes" and my("enum")["type"] == "string"

    def bq(field: str, mode: str = "NULLABLE", **kw: Any) -> dict[str, Any]:
        return map_column(SourceColumn("bigquery", "a", field, mode, **kw))[0]

    assert bq("INT64")["type"] == "integer" and bq("BYTES")["type"] == "bytes"
    assert bq("NUMERIC") == {"name": "a", "type": "decimal", "precision": 38, "scale": 9}
    assert bq("BIGNUMERIC")["type"] == "string"  # 76 digits
    assert bq("BIGNUMERIC", precision=30, scale=4)["precision"] == 30
    assert bq("STRING", "REPEATED")["type"] == "json"


def test_source_values_become_their_columns_python_values() -> None:
    assert fit_value("timestamp", dt.datetime(2024, 1, 2, 3, 4, 5)).tzinfo is dt.UTC
    jira = fit_value("timestamp", "2026-01-02T03:04:05.678+0100")
    assert jira == dt.datetime(2026, 1, 2, 2, 4, 5, 678000, tzinfo=dt.UTC)
    assert fit_value("decimal", 12.5) == decimal.Decimal("12.5")
    assert fit_value("number", decimal.Decimal("2.5")) == 2.5
    assert fit_value("boolean", 1) is True and fit_value("bytes", memoryview(b"\0")) == b"\0"
    assert fit_value("json", '{"a": 1}') == {"a": 1}
    assert fit_value("string", uuid.UUID(int=1)) == "00000000-0000-0000-0000-000000000001"
    assert fit_value("string", b"\0\1") == "AAE="
    assert fit_value("string", decimal.Decimal("1E+2")) == "100"


def test_change_capture_text_is_read_as_the_drivers_values() -> None:
    assert typed("4611686018427387905", "bigint") == BIG
    assert typed(DIGITS, "numeric") == decimal.Decimal(DIGITS)
    assert typed("\\x00ff00", "bytea") == b"\x00\xff\x00"
    assert typed("2024-01-01 21:34:05.123456+00", "timestamp with time zone") == dt.datetime(
        2024, 1, 1, 21, 34, 5, 123456, tzinfo=dt.UTC
    )
    assert typed("1969-07-20", "date") == dt.date(1969, 7, 20)
    assert typed("infinity", "date") == "infinity"  # refused by the column's encoding
    assert typed("{1,2,NULL}", "integer[]") == [1, 2, None]
    assert parse_array('{"a b","c\\"d",NULL,"NULL"}', "text") == ["a b", 'c"d', None, "NULL"]
    assert parse_array("{{1,2},{3,4}}", "integer") == [[1, 2], [3, 4]]


# -- real servers -------------------------------------------------------------------------------

PG_TABLE = """CREATE TABLE {t} (
    id bigint PRIMARY KEY, small smallint, i integer, amount numeric(38, 9), bare numeric,
    r real, d double precision, b boolean, tx text, vc varchar(10), ch char(3), u uuid,
    day date, naive timestamp, at timestamptz, tm time, j json, jb jsonb, blob bytea,
    mood {t}_mood, ints integer[], span interval)"""

PG_ROWS = [
    # 2^62 + 1, every digit of numeric(38,9), µs in three zones, dates before 1970, NUL bytes
    f"({BIG}, -32768, -2147483648, {DIGITS}, 1.5, 1.25, 2.5, true, 'it''s', 'x', 'ab',"
    " 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '1969-07-20', '2024-01-02 03:04:05.123456',"
    " '2024-01-02 03:04:05.123456+05:30', '10:11:12', '{\"a\": 1}', '{\"b\": [1, 2]}',"
    " '\\x00ff00', 'sad', '{1,NULL}', '1 day')",
    "(-9223372036854775808, 0, 0, -0.000000001, 0, 0, 0, false, '', '', '', NULL,"
    " '0001-01-01', '1900-01-01 00:00:00', '1950-06-30 23:59:59.999999-08:00', NULL, 'null',"
    " '[]', '\\x', 'happy', '{}', NULL)",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    " '2024-06-01 12:00:00.000001+00', NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
]

PG_EXPECTED = {
    str(BIG): {
        "id": str(BIG), "small": -32768, "i": -2147483648, "amount": DIGITS,
        "bare": "1.500000000", "r": 1.25, "d": 2.5, "b": True, "tx": "it's", "vc": "x",
        "ch": "ab ", "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "day": "1969-07-20",
        "naive": "2024-01-02T03:04:05.123456Z", "at": "2024-01-01T21:34:05.123456Z",
        "tm": "10:11:12", "j": {"a": 1}, "jb": {"b": [1, 2]}, "blob": "AP8A", "mood": "sad",
        "ints": [1, None], "span": "1 day, 0:00:00",
    },
    "-9223372036854775808": {
        "id": "-9223372036854775808", "small": 0, "i": 0, "amount": "-0.000000001",
        "bare": "0.000000000", "r": 0, "d": 0, "b": False, "tx": "", "vc": "", "ch": "   ",
        "u": None, "day": "0001-01-01", "naive": "1900-01-01T00:00:00.000000Z",
        "at": "1950-07-01T07:59:59.999999Z", "tm": None, "j": None, "jb": [], "blob": "",
        "mood": "happy", "ints": [], "span": None,
    },
}

PG_TYPES = {
    "id": "integer", "small": "integer", "i": "integer", "amount": "decimal", "bare": "decimal",
    "r": "number", "d": "number", "b": "boolean", "tx": "string", "vc": "string",
    "ch": "string", "u": "string", "day": "date", "naive": "timestamp", "at": "timestamp",
    "tm": "string", "j": "json", "jb": "json", "blob": "bytes", "mood": "string",
    "ints": "json", "span": "string",
}
_DECIMAL_38_9 = {"precision": 38, "scale": 9}
PG_SCHEMA: dict[str, Any] = {"table": "typed", "columns": [
    {"name": n, "type": t} | (_DECIMAL_38_9 if t == "decimal" else {})
    for n, t in PG_TYPES.items()
]}
"""The gateway schema the PostgreSQL table gets (both its numerics are decimal(38,9))."""


def _same(row: dict[str, Any], want: dict[str, Any]) -> None:
    for column, value in want.items():
        got = row.get(column)
        if isinstance(value, int | float) and not isinstance(value, bool):
            assert got == value and not isinstance(got, bool), column
        else:
            assert got == value, (column, got, value)


@pytest.fixture
def pg_source() -> Any:
    require_postgres()
    conn = PostgresDialect().connect(PG_DSN)
    conn.autocommit = True
    table = f"ls_types_{uuid.uuid4().hex[:10]}"
    conn.execute(f"CREATE TYPE {table}_mood AS ENUM ('happy', 'sad')")
    conn.execute(PG_TABLE.format(t=table))
    yield conn, table
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"DROP TYPE IF EXISTS {table}_mood")
    conn.close()


def test_every_postgres_type_arrives_as_its_declared_type(
    gateway: GatewayUnderTest, pg_source: Any, caplog: pytest.LogCaptureFixture
) -> None:
    conn, table = pg_source
    conn.execute(f"INSERT INTO {table} VALUES {', '.join(PG_ROWS)}")
    spec = parse_connector(
        "pg1",
        {"kind": "postgres", "gateway": "gw1", "dsn": PG_DSN, "source_table": table,
         "table": "typed", "key": ["id"], "strategy": "diff"},
    )
    with caplog.at_level(logging.WARNING, "lakesync.connectors"):
        assert gateway.poll(open_source(spec)) == 3
    assert any("'span'" in r.getMessage() and "interval" in r.getMessage() for r in caplog.records)
    schema = asyncio.run(gateway.service.schemas("gw1"))["typed"]
    assert schema == parse_schema(PG_SCHEMA)
    rows = gateway.rows("typed")
    for row_id, want in PG_EXPECTED.items():
        _same(rows[row_id], want)
    assert rows["3"]["at"] == "2024-06-01T12:00:00.000001Z"
    # A second poll finds every value equal: nothing is pushed twice.
    assert gateway.poll(open_source(spec)) == 0


MYSQL_TABLE = """CREATE TABLE {t} (
    id bigint PRIMARY KEY, small smallint, big_u bigint unsigned, amount decimal(38, 9),
    f double, b tinyint(1), tx text, vc varchar(10), e enum('happy', 'sad'), day date,
    naive datetime(6), at timestamp(6) NULL, tm time, j json, bin longblob, yr year)"""
MYSQL_ROW = (
    "INSERT INTO {t} VALUES (%s, -32768, 18446744073709551615, %s, 2.5, 1, 'it''s', 'x', 'sad',"
    " '1969-07-20', '2024-01-02 03:04:05.123456', '2024-01-02 03:04:05.123456', '10:11:12',"
    " '{{\"a\": [1, 2]}}', x'00ff00', 1999)"
)
"""One row (parameters: 2^62 + 1 and the 38 digits), inserted in a +05:30 session."""
MYSQL_TYPES = {
    "id": "integer", "small": "integer", "big_u": "decimal", "amount": "decimal",
    "f": "number", "b": "boolean", "tx": "string", "vc": "string", "e": "string",
    "day": "date", "naive": "timestamp", "at": "timestamp", "tm": "string",
    "j": "json", "bin": "bytes", "yr": "integer",
}
MYSQL_SCHEMA: dict[str, Any] = {"table": "typed", "columns": [
    {"name": n, "type": t}
    | ({"precision": 20, "scale": 0} if n == "big_u" else _DECIMAL_38_9 if t == "decimal" else {})
    for n, t in MYSQL_TYPES.items()
]}


def test_every_mysql_type_arrives_as_its_declared_type(gateway: GatewayUnderTest) -> None:
    require_mysql()
    conn = MysqlDialect().connect(MYSQL_DSN)
    conn.autocommit(True)
    table = f"ls_types_{uuid.uuid4().hex[:10]}"
    with conn.cursor() as cur:
        cur.execute(MYSQL_TABLE.format(t=table))
        # The session's zone is not UTC: TIMESTAMP values must still arrive as instants.
        cur.execute("SET time_zone = '+05:30'")
        cur.execute(MYSQL_ROW.format(t=table), (BIG, DIGITS))
    try:
        spec = parse_connector(
            "my1",
            {"kind": "mysql", "gateway": "gw1", "dsn": MYSQL_DSN, "source_table": table,
             "table": "typed", "key": ["id"], "strategy": "diff"},
        )
        assert gateway.poll(open_source(spec)) == 1
        schema = asyncio.run(gateway.service.schemas("gw1"))["typed"]
        assert schema == parse_schema(MYSQL_SCHEMA)
        _same(gateway.rows("typed")[str(BIG)], {
            "id": str(BIG), "small": -32768, "big_u": "18446744073709551615", "amount": DIGITS,
            "f": 2.5, "b": True, "tx": "it's", "vc": "x", "e": "sad", "day": "1969-07-20",
            "naive": "2024-01-02T03:04:05.123456Z", "at": "2024-01-01T21:34:05.123456Z",
            "tm": "10:11:12", "j": {"a": [1, 2]}, "bin": "AP8A", "yr": 1999,
        })
        assert gateway.poll(open_source(spec)) == 0
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {table}")
        conn.close()


def test_a_json_number_beyond_2_to_the_53_arrives_as_the_nearest_double(
    gateway: GatewayUnderTest, pg_source: Any
) -> None:
    """What the data engineer guide says of json columns: a number inside a jsonb value is held
    as JavaScript holds it (protocol §1), so 2^53 + 1 arrives as 2^53, the nearest double; the
    same number in a bigint or numeric column, or as text inside the document, arrives exactly."""
    conn, table = pg_source
    conn.execute(
        f"INSERT INTO {table} (id, amount, jb) VALUES"
        f" (%s, %s, %s::jsonb)", (2**53 + 1, 2**53 + 1,
                                  '{"n": 9007199254740993, "text": "9007199254740993"}'),
    )
    spec = parse_connector(
        "pg1",
        {"kind": "postgres", "gateway": "gw1", "dsn": PG_DSN, "source_table": table,
         "table": "typed", "key": ["id"], "strategy": "diff"},
    )
    assert gateway.poll(open_source(spec)) == 1
    (row,) = gateway.rows("typed").values()
    assert row["id"] == "9007199254740993"  # integer column: exact (a decimal string)
    assert row["amount"] == "9007199254740993.000000000"  # decimal column: exact
    assert row["jb"]["text"] == "9007199254740993"  # text in the document: exact
    assert row["jb"]["n"] == 2**53 and row["jb"]["n"] != 2**53 + 1  # a json number: rounded
