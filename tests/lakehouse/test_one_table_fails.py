"""One table's failure is that table's: ``lakesync pipeline run`` with real
dbt + Spark, real PostgreSQL and MariaDB destinations, and (for the source pull) a real gateway
process.

Schemas registered before a name was reserved (published to the lake's registry, or in the
gateway's store, as an older version left them) fail their own table, naming the name and why;
a table whose model fails fails alone; every other table is built and shipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import msgspec
import psycopg
import pymysql
import pytest
import yaml
from typer.testing import CliRunner

from lakesync.cli.main import app
from lakesync.delta import RowDelta
from lakesync.destinations.factory import mysql_params
from lakesync.hlc import HLC
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.registry import publish_schemas
from lakesync.schema import TableSchema
from tests.api.helpers import auth, token
from tests.gateway_process import ServerProcess

from .conftest import Lake
from .test_shipping import databases

__all__ = ["databases"]

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

TODOS = {"table": "todos", "columns": [{"name": "title", "type": "string"},
                                       {"name": "owner", "type": "string"}]}


def _stored(doc: dict[str, Any]) -> TableSchema:
    """A schema as an older version stored it (no check of today's reserved names)."""
    return msgspec.convert(doc, TableSchema)


def _insert(table: str, row_id: str, hlc: int, **values: Any) -> RowDelta:
    return RowDelta.create("INSERT", table, row_id, "c1", values, hlc)


def _config(path: Path, gw: str, pg_url: str, my_url: str) -> Path:
    path.write_text(yaml.safe_dump({
        "gateways": {gw: {"schemas": [TODOS]}},
        "destinations": {
            "pg": {"kind": "postgres", "url": pg_url, "gateway": gw},
            "maria": {"kind": "mysql", "url": my_url, "gateway": gw, "delete": "hard"},
        },
    }), encoding="utf-8")
    return path


def _pg_rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


def _my_rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    conn = pymysql.connect(**mysql_params(url))  # type: ignore[arg-type]
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return list(cur.fetchall())
    finally:
        conn.close()


def _flat(output: str) -> str:
    return " ".join(output.replace("│", " ").split())  # rich wraps and boxes long lines


def test_a_reserved_column_and_a_failing_model_fail_their_tables_alone(
    lake: Lake, databases: tuple[str, str], tmp_path: Path
) -> None:
    pg_url, my_url = databases
    gw = "gw_cols"
    publish_schemas(open_catalog(lake.settings), [
        # Registered before the names were reserved: Iceberg's `_deleted`, the staging columns.
        (gw, _stored({"table": "flagged", "columns": [
            {"name": "title", "type": "string"}, {"name": "_deleted", "type": "boolean"},
            {"name": "_position", "type": "number"}]})),
        (gw, _stored({"table": "broken", "columns": [{"name": "title", "type": "string"}]})),
    ])
    # `analytics.broken` exists in another shape: its incremental model fails in dbt.
    lake.spark.sql("create table analytics.broken (x int) using iceberg")
    lake.land(gw, [
        _insert("todos", "t1", 1000, title="one", owner="alice"),
        _insert("todos", "t2", 1001, title="two", owner="bob"),
        _insert("flagged", "f1", 1002, title="f", _deleted=False, _position=1),
        _insert("broken", "b1", 1003, title="b"),
    ])
    config = _config(tmp_path / "lakesync.yaml", gw, pg_url, my_url)

    result = CliRunner().invoke(app, ["pipeline", "run", "--config", str(config),
                                      "--data-dir", str(lake.settings.data_dir)])

    out = _flat(result.output)
    assert result.exit_code == 1, out
    assert "column name '_deleted' of table 'flagged' is reserved: an Iceberg metadata" in out
    assert "column name '_position' of table 'flagged' is reserved" in out
    assert "analytics__broken" in out
    # Every other table was built and shipped to both destinations.
    assert sorted(_pg_rows(pg_url, "select row_id, title from todos")) == [
        ("t1", "one"), ("t2", "two")]
    assert sorted(_my_rows(my_url, "select row_id, title from todos")) == [
        ("t1", "one"), ("t2", "two")]
    # The failed tables reached neither destination.
    tables = {r[0] for r in _pg_rows(
        pg_url, "select table_name from information_schema.tables "
                "where table_schema = current_schema()")}
    assert not tables & {"flagged", "broken"}


def test_a_table_named_like_staging_is_reported_and_never_breaks_the_source_pull(
    lake: Lake, databases: tuple[str, str], tmp_path: Path
) -> None:
    pg_url, my_url = databases
    gw = "gw_stage"
    clash = {"table": "lakesync_stage_todos", "columns": [{"name": "title", "type": "string"}]}
    publish_schemas(open_catalog(lake.settings), [(gw, _stored(clash))])
    lake.land(gw, [
        _insert("todos", "t1", 2000, title="one", owner="alice"),
        _insert("lakesync_stage_todos", "s1", 2001, title="mine"),
    ])
    config = _config(tmp_path / "lakesync.yaml", gw, pg_url, my_url)

    result = CliRunner().invoke(app, ["pipeline", "run", "--config", str(config),
                                      "--data-dir", str(lake.settings.data_dir)])

    out = _flat(result.output)
    for rows in (_pg_rows(pg_url, "select row_id, title from todos"),
                 _my_rows(my_url, "select row_id, title from todos")):
        assert sorted(rows) == [("t1", "one")]
    # The staging table is LakeSync's, never the user's table in its shape.
    staging = {r[0] for r in _pg_rows(
        pg_url, "select column_name from information_schema.columns "
                "where table_name = 'lakesync_stage_todos'")}
    assert "_position" in staging and "synced_at" not in staging

    # A gateway whose store holds that schema from before serves `pull?source=` all the same.
    data = tmp_path / "data"
    data.mkdir()
    store = SqliteHotLog(data / "hotlog.sqlite3", HLC())
    store.put_doc(gw, "schema", "lakesync_stage_todos", clash)
    store.close()
    gateway_config = tmp_path / "gateway.yaml"
    gateway_config.write_text(yaml.safe_dump({
        "gateways": {gw: {"schemas": [TODOS]}},
        "destinations": {"pg": {"kind": "postgres", "url": pg_url, "gateway": gw}},
    }), encoding="utf-8")
    with ServerProcess(data, config=gateway_config) as server:
        r = httpx.get(f"{server.url}/v1/sync/{gw}/pull", headers=auth(token("alice", gw=gw)),
                      params={"source": "pg", "since": "0", "clientId": "alice"}, timeout=30)
        assert r.status_code == 200, r.text
        assert [(d["table"], d["rowId"]) for d in r.json()["deltas"]] == [("todos", "t1")]
    # The table was never silently shipped into the staging table's name: it is reported.
    assert "table name 'lakesync_stage_todos' is reserved" in out, out
    assert result.exit_code == 1, out
