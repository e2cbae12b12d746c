"""A bytes column in ``lakesync query``'s table: a 1,000-byte value is shown as the start of its
base64 and its size, so the table (printed whole when piped) stays a screen wide; ``--format
json`` carries the value whole. The rows come from DuckDB, as the lake's do."""

from __future__ import annotations

import base64
import json

import duckdb
import pytest

from lakesync.cli.query import print_result
from lakesync.lakehouse.query import QueryResult


def _result() -> QueryResult:
    con = duckdb.connect()
    cursor = con.execute(
        "select 'r1' as row_id, repeat('\\xAA\\x01'::blob, 500) as payload,"
        " '\\x01\\x02'::blob as small"
    )
    columns = [d[0] for d in cursor.description]
    return QueryResult(columns, cursor.fetchall())


def test_a_long_bytes_value_keeps_the_table_narrow(capsys: pytest.CaptureFixture[str]) -> None:
    result = _result()
    assert isinstance(result.rows[0][1], bytes) and len(result.rows[0][1]) == 1000
    print_result(result, "table")
    shown = capsys.readouterr().out
    assert max(len(line) for line in shown.splitlines()) < 100, shown
    whole = base64.b64encode(result.rows[0][1]).decode("ascii")
    assert f"{whole[:24]}… (1,000 bytes)" in shown
    assert "AQI=" in shown  # a short value is shown whole, as base64


def test_json_carries_the_bytes_whole(capsys: pytest.CaptureFixture[str]) -> None:
    result = _result()
    print_result(result, "json")
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert base64.b64decode(row["payload"]) == result.rows[0][1]
