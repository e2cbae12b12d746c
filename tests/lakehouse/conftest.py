"""Shared lake fixtures: one bootstrapped data dir and one Spark session per test module.

A Spark session is bound to the catalog it was built with, and each dbt run costs seconds, so
Spark/dbt tests share a module-scoped lake and keep examples apart by gateway id.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pymysql
import pytest

from lakesync.delta import RowDelta
from lakesync.destinations.factory import mysql_params
from lakesync.hlc import HLC
from lakesync.hotlog.base import HotLog
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.lakehouse.bootstrap import bootstrap
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.settings import LakeSettings
from tests.conftest import PG_DSN
from tests.connectors.conftest import MYSQL_DSN
from tests.destinations.conftest import BIGQUERY_ENDPOINT, require_bigquery

__all__ = ["Lake", "append_in_order", "destinations", "make_lake"]


def append_in_order(log: HotLog, entries: Iterable[tuple[str, RowDelta]]) -> list[int]:
    """Append each ``(gateway_id, delta)`` to the hot log as a push of its own, in order; the
    ingest HLCs the store stamped (a known deltaId is skipped, as the gateway skips it)."""
    return [e.ingest_hlc for gw, d in entries for e in log.append(gw, [d]).stored]


@dataclass
class Lake:
    """A bootstrapped lake with the gateway's SQLite hot log feeding its landing table."""

    settings: LakeSettings
    log: HotLog
    spark: Any

    def land(self, gateway_id: str, deltas: list[RowDelta]) -> None:
        """Append ``deltas`` to the hot log in the given order and flush them to landing."""
        append_in_order(self.log, [(gateway_id, d) for d in deltas])
        LandingFlusher(open_catalog(self.settings), self.log).flush()

    def rows(self, sql: str) -> list[dict[str, Any]]:
        return [r.asDict() for r in self.spark.sql(sql).collect()]


def make_lake(root: Path, env: dict[str, str] | None = None) -> Lake:
    from lakesync.lakehouse.spark import spark_session

    settings = LakeSettings.from_env(root, env=env or {})
    bootstrap(settings)
    return Lake(settings, SqliteHotLog(root / "hotlog.sqlite3", HLC()), spark_session(settings))


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    lk = make_lake(tmp_path_factory.mktemp("lake"))
    yield lk
    lk.spark.stop()
    lk.log.close()


@pytest.fixture(scope="module")
def destinations() -> Iterator[dict[str, str]]:
    """Fresh PostgreSQL and MariaDB databases and a BigQuery dataset, by destination name
    (``pg``, ``maria``, ``bq``), dropped after the module."""
    require_bigquery()
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'create database "{name}"')
    my = pymysql.connect(**mysql_params(MYSQL_DSN))
    with my.cursor() as cur:
        cur.execute(f"create database `{name}`")
    urls = {
        "pg": urlunsplit(urlsplit(PG_DSN)._replace(path=f"/{name}")),
        "maria": urlunsplit(urlsplit(MYSQL_DSN)._replace(path=f"/{name}")),
        "bq": f"bigquery://test-project/{name}?endpoint={BIGQUERY_ENDPOINT}",
    }
    try:
        yield urls
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'drop database "{name}" with (force)')
        with my.cursor() as cur:
            cur.execute(f"drop database `{name}`")
        my.close()
