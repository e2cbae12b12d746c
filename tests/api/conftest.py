"""Shared fixtures of the gateway tests: stores over SQLite and PostgreSQL, tokens, an app."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from api.store.base import HotLog
from api.store.postgres import PostgresHotLog
from api.store.sqlite import SqliteHotLog
from lakesync.hlc import HLC

PG_DSN = os.environ.get("LAKESYNC_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
SECRET = "test-secret-0123456789abcdef0123456789"
PREVIOUS_SECRET = "previous-secret-0123456789abcdef012345"


def pg_available() -> bool:
    """Whether the test PostgreSQL server answers."""
    try:
        with psycopg.connect(PG_DSN, connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


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
    if not pg_available():
        pytest.skip(f"PostgreSQL not reachable at {PG_DSN}")
    schema = fresh_pg_schema()
    s = PostgresHotLog(PG_DSN, clock, schema=schema, pool_size=4)
    yield s
    s.close()
    drop_pg_schema(schema)
