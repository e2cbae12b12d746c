"""Shared fixtures of the gateway tests: stores over SQLite and PostgreSQL, tokens, an app."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from litestar.testing import TestClient
from psycopg import sql

from lakesync.api.app import create_app
from lakesync.api.store.base import HotLog
from lakesync.api.store.postgres import PostgresHotLog
from lakesync.api.store.sqlite import SqliteHotLog
from lakesync.hlc import HLC
from tests.api.helpers import Gateway, make_settings
from tests.conftest import PG_DSN, require_postgres


def fresh_pg_schema() -> str:
    """A unique schema name so parallel runs never collide."""
    return f"lakesync_test_{uuid.uuid4().hex[:12]}"


def drop_pg_schema(schema: str) -> None:
    """Remove a test schema and everything in it."""
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HotLog]:
    """Each store implementation, fresh and empty."""
    clock = HLC()
    if request.param == "sqlite":
        s: HotLog = SqliteHotLog(tmp_path / "hot.sqlite3", clock)
        yield s
        s.close()
        return
    require_postgres()
    schema = fresh_pg_schema()
    s = PostgresHotLog(PG_DSN, clock, schema=schema, pool_size=4)
    yield s
    s.close()
    drop_pg_schema(schema)


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    """A fresh app on an embedded SQLite store."""
    with TestClient(create_app(make_settings(tmp_path))) as client:
        yield Gateway(client)
