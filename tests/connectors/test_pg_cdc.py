"""PostgreSQL change capture through a logical replication slot.

The shared test server runs ``wal_level = replica`` (a server-start setting others' tests
depend on), so these tests start a private PostgreSQL with ``wal_level = logical`` (initdb as
the ``postgres`` user in a temporary directory, on a free port) and skip where the PostgreSQL
binaries are missing (or fail under CI).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync.connector_specs import parse_connector
from lakesync.connectors import Source, open_source
from lakesync.connectors._decoding import RowChange, parse_change
from lakesync.errors import ConfigError
from tests.conftest import PG_DSN, require_postgres
from tests.connectors.conftest import GatewayUnderTest
from tests.connectors.test_jira import CrashAfter
from tests.connectors.test_source_types import PG_EXPECTED, PG_ROWS, PG_TABLE
from tests.pg_cluster import private_postgres

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def logical_dsn() -> Iterator[str]:
    """A private PostgreSQL with wal_level = logical, for this module."""
    with private_postgres("-c wal_level=logical") as cluster:
        yield cluster.dsn


class Db:
    def __init__(self, dsn: str, name: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.table = name
        self.run(
            f"CREATE TABLE {name} (id integer PRIMARY KEY, name text, price numeric,"
            " doc jsonb, done boolean)"
        )

    def run(self, sql: str, *params: Any) -> None:
        self.conn.execute(sql, params or None)

    def rows(self) -> dict[str, dict[str, Any]]:
        found = self.conn.execute(f"SELECT id, name, done FROM {self.table}").fetchall()
        return {str(i): {"name": n, "done": d} for i, n, d in found}


def source(dsn: str, table: str, slot: str, **kw: Any) -> Source:
    body = {
        "kind": "postgres_cdc",
        "gateway": "gw1",
        "dsn": dsn,
        "slot": slot,
        "tables": {f"public.{table}": "items"},
        "chunk_rows": 5,
    } | kw
    return open_source(parse_connector("cdc1", body))


def mirrored(gateway: GatewayUnderTest) -> dict[str, dict[str, Any]]:
    return {
        k: {"name": v.get("name"), "done": v.get("done")} for k, v in gateway.rows("items").items()
    }


def test_inserts_updates_deletes_and_a_key_change_arrive_through_the_slot(
    gateway: GatewayUnderTest, logical_dsn: str
) -> None:
    db = Db(logical_dsn, "cdc_items_a")
    for i in range(12):
        db.run(
            f"INSERT INTO {db.table} VALUES (%s, %s, %s, %s, %s)",
            i,
            f"n{i}",
            i * 1.5,
            '{"k": 1}',
            i % 2 == 0,
        )
    gateway.poll(source(logical_dsn, db.table, "slot_a"))  # creates the slot, loads the table
    assert mirrored(gateway) == db.rows()
    db.run(f"UPDATE {db.table} SET name = 'it''s', done = true WHERE id = 3")
    db.run(f"DELETE FROM {db.table} WHERE id IN (4, 5)")
    db.run(f"UPDATE {db.table} SET id = 100 WHERE id = 6")
    db.run(f"INSERT INTO {db.table} VALUES (200, 'new', 1, null, false)")
    before = len(gateway.log())
    gateway.poll(source(logical_dsn, db.table, "slot_a"))
    assert mirrored(gateway) == db.rows()
    assert gateway.rows("items")["3"]["price"] == "4.500000000"  # numeric: decimal(38,9)
    assert (
        len(gateway.log()) - before == 6
    )  # update, 2 deletes, key change (delete + insert), insert
    assert gateway.poll(source(logical_dsn, db.table, "slot_a")) == 0


def test_every_type_arrives_through_the_slot_as_the_first_load_brings_it(
    gateway: GatewayUnderTest, logical_dsn: str
) -> None:
    conn = psycopg.connect(logical_dsn, autocommit=True)
    conn.execute("CREATE TYPE cdc_typed_mood AS ENUM ('happy', 'sad')")
    conn.execute(PG_TABLE.format(t="cdc_typed"))
    conn.execute(f"INSERT INTO cdc_typed VALUES {PG_ROWS[1]}")  # loaded (a diff read)
    gateway.poll(source(logical_dsn, "cdc_typed", "slot_typed"))
    conn.execute(f"INSERT INTO cdc_typed VALUES {PG_ROWS[0]}, {PG_ROWS[2]}")  # changes
    gateway.poll(source(logical_dsn, "cdc_typed", "slot_typed"))
    rows = gateway.rows("items")
    for row_id, want in PG_EXPECTED.items():
        # test_decoding prints an interval as PostgreSQL does, the driver as Python does.
        got = {k: v for k, v in rows[row_id].items() if k != "span"}
        assert got == {k: v for k, v in want.items() if k != "span"}, row_id
    assert rows["3"]["at"] == "2024-06-01T12:00:00.000001Z"
    assert rows[str(2**62 + 1)]["span"] == "1 day"
    conn.close()


def test_a_crash_mid_stream_resumes_from_the_slot_without_loss(
    gateway: GatewayUnderTest, logical_dsn: str
) -> None:
    db = Db(logical_dsn, "cdc_items_b")
    gateway.poll(source(logical_dsn, db.table, "slot_b"))
    for i in range(40):
        db.run(f"INSERT INTO {db.table} VALUES (%s, %s, 1, null, false)", i, f"n{i}")
    db.run(f"DELETE FROM {db.table} WHERE id < 10")
    with pytest.raises(RuntimeError, match="killed"):
        gateway.poll(CrashAfter(source(logical_dsn, db.table, "slot_b"), 3))
    gateway.restart()
    gateway.poll(source(logical_dsn, db.table, "slot_b"))
    assert mirrored(gateway) == db.rows()
    assert len({d.delta_id for d in gateway.log()}) == len(gateway.log())


def test_a_server_without_logical_decoding_is_a_clear_error(gateway: GatewayUnderTest) -> None:
    require_postgres()
    with psycopg.connect(PG_DSN) as conn:
        level = conn.execute("SHOW wal_level").fetchone()
        conn.execute("CREATE TABLE IF NOT EXISTS cdc_probe (id integer PRIMARY KEY)")
        conn.commit()
    if level is not None and level[0] == "logical":
        pytest.skip("the shared server has logical decoding on")
    with pytest.raises(ConfigError, match="wal_level = logical"):
        gateway.poll(source(PG_DSN, "cdc_probe", "slot_probe"))


IDENT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=8)
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=10)


def _quote_ident(name: str) -> str:
    bare = name.isidentifier() and name.islower() and name.isascii()
    return name if bare else '"' + name.replace('"', '""') + '"'


@given(st.dictionaries(IDENT, st.one_of(st.none(), st.integers(), TEXT, st.booleans()), min_size=1))
def test_decoded_lines_give_back_the_tuple(row: dict[str, Any]) -> None:
    parts = []
    for name, value in row.items():
        if value is None:
            parts.append(f"{_quote_ident(name)}[text]:null")
        elif isinstance(value, bool):
            parts.append(f"{_quote_ident(name)}[boolean]:{'true' if value else 'false'}")
        elif isinstance(value, int):
            parts.append(f"{_quote_ident(name)}[bigint]:{value}")
        else:
            parts.append(
                f"{_quote_ident(name)}[character varying]:'{value.replace(chr(39), chr(39) * 2)}'"
            )
    line = f'table public."My Table": INSERT: {" ".join(parts)}'
    assert parse_change(line) == RowChange("public", "My Table", "INSERT", new=row)
    assert parse_change("BEGIN") is None and parse_change("COMMIT") is None
