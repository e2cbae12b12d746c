"""Database sources against the real PostgreSQL and MariaDB: cursor and diff strategies."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync.connector_specs import parse_connector
from lakesync.connectors import Source, open_source
from lakesync.connectors._values import json_value
from lakesync.connectors.database import MysqlDialect, PostgresDialect
from tests.conftest import PG_DSN, require_postgres
from tests.connectors.conftest import MYSQL_DSN, GatewayUnderTest, require_mysql
from tests.connectors.test_jira import CrashAfter

Execute = Callable[..., None]


class SourceDb:
    """A unique table on one of the servers, and SQL run on it (autocommit)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.table = f"ls_conn_{uuid.uuid4().hex[:10]}"
        if kind == "postgres":
            require_postgres()
            self.dsn = PG_DSN
            self.conn = PostgresDialect().connect(PG_DSN)
            self.conn.autocommit = True
            ts, js, boolean = "timestamptz", "jsonb", "boolean"
        else:
            require_mysql()
            self.dsn = MYSQL_DSN
            self.conn = MysqlDialect().connect(MYSQL_DSN)
            self.conn.autocommit(True)
            ts, js, boolean = "timestamp(6)", "json", "tinyint(1)"
        self.run(
            f"CREATE TABLE {self.table} (id integer NOT NULL, region varchar(8) NOT NULL,"
            f" name varchar(100), price numeric(10, 2), active {boolean}, doc {js},"
            f" changed_at {ts} NOT NULL, PRIMARY KEY (id, region))"
        )

    def run(self, statement: str, *params: Any) -> None:
        if self.kind == "postgres":
            self.conn.execute(statement, params or None)
        else:
            with self.conn.cursor() as cur:
                cur.execute(statement, params or None)

    def insert(self, i: int, name: str, at: str) -> None:
        self.run(
            f"INSERT INTO {self.table} VALUES (%s, 'eu', %s, %s, %s, %s, %s)",
            i,
            name,
            i * 1.5,
            i % 2 == 0,
            '{"tags": ["a"]}',
            at,
        )

    def expected(self) -> dict[str, dict[str, Any]]:
        if self.kind == "postgres":
            rows = self.conn.execute(f"SELECT id, region, name FROM {self.table}").fetchall()
        else:
            with self.conn.cursor() as cur:
                cur.execute(f"SELECT id, region, name FROM {self.table}")
                rows = cur.fetchall()
        return {f"{i}:{r}": {"name": n} for i, r, n in rows}

    def drop(self) -> None:
        self.run(f"DROP TABLE IF EXISTS {self.table}")
        self.conn.close()


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),
    ]
)
def db(request: pytest.FixtureRequest) -> Iterator[SourceDb]:
    source = SourceDb(request.param)
    yield source
    source.drop()


def source_for(db: SourceDb, **kw: Any) -> Source:
    body = {"kind": db.kind, "gateway": "gw1", "dsn": db.dsn, "source_table": db.table}
    body |= {"table": "items", "key": ["id", "region"], "chunk_rows": 7} | kw
    return open_source(parse_connector("db1", body))


def names(gateway: GatewayUnderTest) -> dict[str, dict[str, Any]]:
    return {k: {"name": v["name"]} for k, v in gateway.rows("items").items()}


def test_cursor_strategy_follows_inserts_and_updates_with_lookback(
    gateway: GatewayUnderTest, db: SourceDb
) -> None:
    for i in range(30):
        db.insert(i, f"item {i}", f"2026-01-01 10:00:{i:02d}")
    kw = {"strategy": "cursor", "cursor_column": "changed_at", "lookback": 5}
    gateway.poll(source_for(db, **kw))
    assert names(gateway) == db.expected()
    row = gateway.rows("items")["4:eu"]
    assert (row["price"], row["active"], row["doc"]) == ("6.00", True, {"tags": ["a"]})
    assert gateway.store.list_docs("gw1", "schema")["items"]["columns"][3] == {
        "name": "price",
        "type": "decimal",
        "precision": 10,
        "scale": 2,
    }
    # An update moves the row's cursor value on; a late commit 3 s behind the cursor is found
    # thanks to the lookback.
    db.run(
        f"UPDATE {db.table} SET name = 'renamed', changed_at = '2026-01-01 10:01:00' WHERE id = 2"
    )
    db.insert(100, "late", "2026-01-01 10:00:57")
    before = len(gateway.log())
    gateway.poll(source_for(db, **kw))
    assert names(gateway) == db.expected()
    assert len(gateway.log()) - before == 2


def test_diff_strategy_sees_inserts_updates_and_deletes_and_resumes_after_a_crash(
    gateway: GatewayUnderTest, db: SourceDb
) -> None:
    for i in range(40):
        db.insert(i, f"item {i}", "2026-01-01 10:00:00")
    gateway.poll(source_for(db, strategy="diff"))
    assert names(gateway) == db.expected()
    db.run(f"DELETE FROM {db.table} WHERE id IN (3, 33)")
    db.run(f"UPDATE {db.table} SET name = 'changed' WHERE id = 7")
    db.insert(41, "new", "2026-01-01 10:00:00")
    with pytest.raises(RuntimeError, match="killed"):
        gateway.poll(CrashAfter(source_for(db, strategy="diff"), 3))
    gateway.restart()
    before = len(gateway.log())
    gateway.poll(source_for(db, strategy="diff"))
    assert names(gateway) == db.expected()
    assert len(gateway.log()) - before <= 4  # only what the crashed poll had not stored
    assert gateway.poll(source_for(db, strategy="diff")) == 0


def test_an_unknown_table_or_column_is_a_clear_error(
    gateway: GatewayUnderTest, db: SourceDb
) -> None:
    with pytest.raises(Exception, match="not found"):
        gateway.poll(source_for(db, source_table="no_such_table", strategy="diff"))
    with pytest.raises(Exception, match="no column"):
        gateway.poll(source_for(db, columns=["nope"], strategy="diff"))


@given(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.text(),
        st.decimals(allow_nan=False, allow_infinity=False),
        st.datetimes(),
        st.uuids(),
        st.binary(),
    )
)
def test_every_database_value_becomes_a_json_value(value: Any) -> None:
    import msgspec

    out = json_value(value)
    assert msgspec.json.decode(msgspec.json.encode(out)) == out
