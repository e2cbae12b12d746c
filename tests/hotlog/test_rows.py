"""The merged rows' behaviour suite (parts of PullLog and RowLookup): merged row states, their
history, the rules' filter-column index and who wrote which row, run on every store (the
``store`` fixture: SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from psycopg import sql

from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.hotlog.base import HotLog
from lakesync.hotlog.postgres import PostgresHotLog
from lakesync.rules import lookups, parse_rules
from tests.conftest import PG_DSN, drop_pg_schema, fresh_pg_schema, require_postgres
from tests.hotlog.common import d, insert


def test_rows_hold_merged_state(store: HotLog) -> None:
    late = d("UPDATE", "r1", 5, client="c2", title="late", done=True)
    res = store.append("gw1", [d("INSERT", "r1", 10, title="new")])
    res2 = store.append("gw1", [late])
    row = res2.rows[("todos", "r1")]
    assert row.state.visible() == {"title": "new", "done": True}
    assert row.last_ingest == res2.head > res.head
    stored = store.read_rows("gw1", [("todos", "r1"), ("todos", "nope")])
    assert list(stored) == [("todos", "r1")]
    assert stored[("todos", "r1")].state.visible() == {"title": "new", "done": True}


def test_the_filter_column_index_follows_rules_and_appends(store: HotLog) -> None:
    owner = parse_rules(
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
    store.append(
        "gw1", [d("INSERT", f"r{i}", 10 + i, owner="bob" if i % 2 else "alice") for i in range(6)]
    )
    alice = lookups(owner, {"sub": "alice"})
    assert alice is not None
    assert store.read_matching("gw1", alice, []) is None  # no rules yet: nothing indexed
    store.set_rules("gw1", owner)
    page = store.read_matching("gw1", alice, [("todos", "r1")])
    assert page is not None and sorted(k[1] for k in page.rows) == ["r0", "r1", "r2", "r4"]
    # Appends keep it current: r0 is given away, r3 comes to alice, r2 is deleted.
    store.append(
        "gw1",
        [
            d("UPDATE", "r0", 20, owner="bob"),
            d("UPDATE", "r3", 21, owner="alice"),
            d("DELETE", "r2", 22),
        ],
    )
    page = store.read_matching("gw1", alice, [])
    assert page is not None and sorted(k[1] for k in page.rows) == ["r3", "r4"]
    assert page.head == store.head()
    assert store.read_matching("gw2", alice, []) is None


def test_rows_written_by_a_client(store: HotLog) -> None:
    store.append(
        "gw1", [d("INSERT", "r1", 10, client="alice"), d("INSERT", "r2", 11, client="bob")]
    )
    store.append(
        "gw1", [d("UPDATE", "r1", 12, client="alice"), d("DELETE", "r3", 13, client="alice")]
    )
    store.append("gw2", [d("INSERT", "r9", 14, client="alice")])
    assert sorted(store.rows_written_by("gw1", "alice")) == [("todos", "r1"), ("todos", "r3")]
    assert store.rows_written_by("gw1", "carol") == []


def test_row_ids_page_through_a_table_in_id_order(store: HotLog) -> None:
    store.append("gw1", [d("INSERT", f"r{i}", 20 + i) for i in (3, 1, 4, 5, 9, 2)])
    store.append("gw1", [d("DELETE", "r4", 30)])
    store.append("gw2", [d("INSERT", "r0", 31)])
    first = store.row_ids("gw1", "todos", None, 4)
    assert first == ["r1", "r2", "r3", "r4"]  # deleted rows are stored rows too
    assert store.row_ids("gw1", "todos", first[-1], 4) == ["r5", "r9"]
    assert store.row_ids("gw1", "todos", "r9", 4) == []
    assert store.row_ids("gw1", "notes", None, 4) == []


def test_rows_written_among_looks_up_only_the_given_rows(store: HotLog) -> None:
    store.append("gw1", [insert(f"r{i}", 10 + i) for i in range(3)])
    store.append("gw1", [RowDelta.create("UPDATE", "todos", "r9", "c2", {"n": 1}, 30)])
    store.append("gw2", [insert("r5", 40)])
    keys = [("todos", "r0"), ("todos", "r2"), ("todos", "r5"), ("todos", "r9"), ("x", "r1")]
    assert store.rows_written_among("gw1", "c1", keys) == {("todos", "r0"), ("todos", "r2")}
    assert store.rows_written_among("gw1", "c2", keys) == {("todos", "r9")}
    assert store.rows_written_among("gw1", "c1", []) == set()


def test_rows_written_if_few_reads_them_up_to_a_limit(store: HotLog) -> None:
    store.append("gw1", [insert(f"r{i}", 10 + i) for i in range(3)])
    store.append("gw1", [insert("r0", 20), insert("r1", 21)])  # entries, not rows, count
    store.append("gw1", [RowDelta.create("UPDATE", "todos", "r9", "c2", {"n": 1}, 30)])
    store.append("gw2", [insert("r5", 40)])
    mine = {("todos", "r0"), ("todos", "r1"), ("todos", "r2")}
    assert store.rows_written_if_few("gw1", "c1", 5) == mine
    assert store.rows_written_if_few("gw1", "c1", 4) is None
    assert store.rows_written_if_few("gw1", "c2", 1) == {("todos", "r9")}
    assert store.rows_written_if_few("gw1", "carol", 0) == set()
    assert store.rows_written_if_few("gw2", "c2", 10) == set()


def _log_entries_read(plan: dict[str, Any], relation: str = "log") -> int:
    """Rows of ``relation`` a plan node and its children read (returned or filtered out), over
    all loops."""
    read = 0
    if plan.get("Relation Name") == relation:
        kept = plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0)
        read = (kept + plan.get("Rows Removed by Index Recheck", 0)) * plan["Actual Loops"]
    return read + sum(_log_entries_read(p, relation) for p in plan.get("Plans", ()))


@pytest.mark.postgres
def test_postgres_looks_up_a_chunks_writers_by_row_on_a_log_never_analysed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The look-up reads the keys' log entries only, not every entry of the client, also before
    PostgreSQL has statistics of the log (a checkpoint served right after a load): otherwise each
    chunk of a checkpoint under rules costs a scan of everything the client wrote."""
    require_postgres()
    schema = fresh_pg_schema()
    store = PostgresHotLog(PG_DSN, HLC(), schema=schema, pool_size=2)
    try:
        store.append("gw1", [insert(f"r{i}", 10 + i) for i in range(2_000)])
        theirs = [
            RowDelta.create("INSERT", "todos", f"o{i}", "c2", {"n": i}, 5_000 + i)
            for i in range(50)
        ]
        store.append("gw1", theirs)
        keys = [("todos", d.row_id) for d in theirs]
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            # Rows c1 wrote whose entries were trimmed: probed by key too, not scanned.
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            conn.execute(
                "INSERT INTO trimmed_writers SELECT 'gw1', 'c1', 'todos', 't' || i"
                " FROM generate_series(1, 2000) AS i"
            )
        statements: list[tuple[Any, Any]] = []
        execute, caller = psycopg.Connection.execute, threading.get_ident()

        def recorded(conn: Any, query: Any, params: Any = None, **kw: Any) -> Any:
            # Not the store's writer or listener, nor the pool's check (an empty statement).
            if threading.get_ident() == caller and query:
                statements.append((query, params))
            return execute(conn, query, params, **kw)

        monkeypatch.setattr(psycopg.Connection, "execute", recorded)
        assert store.rows_written_among("gw1", "c1", keys) == set()
        monkeypatch.undo()
        assert store.rows_written_among("gw1", "c2", keys) == set(keys)
        read = trimmed = 0
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            for query, params in statements:
                explain = sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + sql.SQL(query)
                ((plan,),) = conn.execute(explain, params).fetchall()
                read += _log_entries_read(plan[0]["Plan"])
                trimmed += _log_entries_read(plan[0]["Plan"], "trimmed_writers")
        assert statements and read <= len(keys) and trimmed <= len(keys)
    finally:
        store.close()
        drop_pg_schema(schema)


@pytest.mark.postgres
def test_postgres_finds_that_a_client_wrote_nothing_without_reading_the_log() -> None:
    """A fresh client's checkpoint asks once whether it wrote anything: the answer comes from the
    client's index, not from a scan of every entry, also on a log never analysed."""
    require_postgres()
    schema = fresh_pg_schema()
    store = PostgresHotLog(PG_DSN, HLC(), schema=schema, pool_size=2)
    try:
        store.append("gw1", [insert(f"r{i}", 10 + i) for i in range(2_000)])
        assert store.rows_written_if_few("gw1", "fresh", 10_000) == set()
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            ((plan,),) = conn.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) SELECT tbl, row_id FROM log"
                " WHERE gw = %s AND client_id = %s LIMIT %s",
                ("gw1", "fresh", 10_001),
            ).fetchall()
        assert _log_entries_read(plan[0]["Plan"]) == 0
    finally:
        store.close()
        drop_pg_schema(schema)
