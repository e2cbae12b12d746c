"""What the store behaviour suites share: deltas, rules and a second handle on a store."""

from __future__ import annotations

import psycopg

from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.hotlog.base import HotLog
from lakesync.hotlog.postgres import PostgresHotLog
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.rules import parse_rules

RULES = parse_rules(
    {
        "version": 1,
        "buckets": [
            {
                "name": "mine",
                "tables": ["todos"],
                "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
            }
        ],
    }
)


def d(op: str, row: str, hlc: int, client: str = "c1", **cols: object) -> RowDelta:
    """A delta of ``todos`` with the given columns."""
    return RowDelta.create(op, "todos", row, client, cols, hlc)  # type: ignore[arg-type]


def insert(row: str, hlc: int) -> RowDelta:
    """Client ``c1``'s insert of ``todos`` row ``row`` with ``n = hlc``."""
    return RowDelta.create("INSERT", "todos", row, "c1", {"n": hlc}, hlc)


def another(store: HotLog) -> HotLog:
    """A second handle on the data of ``store``, as another process (or a restart) opens it."""
    if isinstance(store, SqliteHotLog):
        return SqliteHotLog(store._path, HLC())
    assert isinstance(store, PostgresHotLog)
    return PostgresHotLog(store._dsn, HLC(), schema=store._schema, pool_size=2)


def slow_commits(url: str, up_to: float) -> None:
    """Make each append of the PostgreSQL store at ``url`` take up to ``up_to`` seconds between
    stamping its entries and its commit (as under load): another store's later stamps then
    often commit first."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "create function lakesync.slow_commit() returns trigger language plpgsql as"
            f" $$ begin perform pg_sleep(random() * {float(up_to)}); return null; end $$"
        )
        conn.execute(
            "create trigger slow_commit after insert on lakesync.log"
            " for each statement execute function lakesync.slow_commit()"
        )
