"""Reading typed rows back for the typed end-to-end tests: from the gateway, from
``analytics.<table>`` and from the PostgreSQL, MariaDB and BigQuery destinations. Each reader
returns rowId → cells as its driver gives them, normalised only where the driver's type is not
Python's (MariaDB's DATETIME(6) is naive UTC and its BOOLEAN a tinyint)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import pymysql

from lakesync.connectors.bigquery import bigquery_client
from lakesync.destinations.base import collect_rows
from lakesync.destinations.factory import mysql_params
from tests.api.helpers import auth, token
from tests.destinations.conftest import BIGQUERY_ENDPOINT


def same_values(got: dict[str, Any], want: dict[str, Any], where: str) -> None:
    """Assert every column of ``want`` equals ``got``'s (a boolean stays a ``bool``)."""
    for column, value in want.items():
        assert got.get(column) == value, (where, column, got.get(column), value)
        if isinstance(value, bool):
            assert isinstance(got[column], bool), (where, column)


def pull_cells(
    url: str, gateway: str, source: str | None = None, since: str = "0"
) -> tuple[dict[str, dict[str, Any]], str]:
    """Every row the gateway (or, with ``source``, a destination) serves after ``since``:
    table/rowId → cells, and the cursor to pull from next (the last page's ``serverHlc``)."""
    params = {"since": since, "limit": "1000", "clientId": "reader"}
    if source is not None:
        params["source"] = source
    out: dict[str, dict[str, Any]] = {}
    while True:
        r = httpx.get(f"{url}/v1/sync/{gateway}/pull", params=params,
                      headers=auth(token("reader", gateway)), timeout=120)
        assert r.status_code == 200, r.text[:500]
        body = r.json()
        for d in body["deltas"]:
            out.setdefault(f"{d['table']}/{d['rowId']}", {}).update(
                {c["column"]: c["value"] for c in d["columns"]})
        params["since"] = str(body["serverHlc"])
        if not body.get("hasMore"):
            return out, params["since"]


def analytics_rows(spark: Any, table: str, gateway: str) -> dict[str, dict[str, Any]]:
    """``analytics.<table>``'s rows of ``gateway`` by row id, as Python values."""
    frame = spark.sql(f"select * from analytics.{table} where gateway_id = '{gateway}'")
    return {r["row_id"]: r for r in collect_rows(frame)}


def pg_rows(url: str, table: str) -> dict[str, dict[str, Any]]:
    """A PostgreSQL destination table's rows by row id."""
    with psycopg.connect(url) as conn:
        cur = conn.execute(f'select * from "{table}"')
        names = [c.name for c in cur.description or []]
        return {str(r[names.index("row_id")]): dict(zip(names, r, strict=True))
                for r in cur.fetchall()}


def pg_types(url: str, table: str) -> dict[str, str]:
    """A PostgreSQL destination table's column types (``numeric(p,s)`` with its precision)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "select column_name, data_type, numeric_precision, numeric_scale"
            " from information_schema.columns where table_name = %s", (table,)).fetchall()
    return {n: f"{t}({p},{s})" if t == "numeric" else t for n, t, p, s in rows}


def maria(url: str, sql: str) -> list[dict[str, Any]]:
    """The rows of ``sql`` run on the MariaDB database at ``url``."""
    conn = pymysql.connect(**mysql_params(url), cursorclass=pymysql.cursors.DictCursor)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return list(cur.fetchall())
    finally:
        conn.close()


def maria_rows(url: str, table: str, booleans: Collection[str]) -> dict[str, dict[str, Any]]:
    """A MariaDB destination table's rows by row id; ``booleans`` names its boolean columns."""
    out = {}
    for row in maria(url, f"select * from `{table}`"):
        # DATETIME(6) holds the UTC wall time of the instant; BOOLEAN is tinyint(1), read as 0/1.
        out[str(row["row_id"])] = {
            k: v.replace(tzinfo=dt.UTC) if isinstance(v, dt.datetime)
            else bool(v) if k in booleans and v is not None else v
            for k, v in row.items()
        }
    return out


def bq_rows(url: str, table: str) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """A BigQuery destination table's rows by row id, and its column types."""
    client = bigquery_client(f"bigquery://test-project?endpoint={BIGQUERY_ENDPOINT}")
    dataset = urlsplit(url).path.strip("/")
    result = client.query(f"select * from `{dataset}`.`{table}`").result()
    schema = {f.name: f.field_type for f in client.get_table(f"{dataset}.{table}").schema}
    return {str(r["row_id"]): dict(r.items()) for r in result}, schema
