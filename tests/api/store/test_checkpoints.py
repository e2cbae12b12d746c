"""Checkpoint generations and hot-log trimming on every store."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from psycopg import sql

from lakesync.api.store.base import HotLog
from lakesync.api.store.postgres import PostgresHotLog
from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from tests.api.conftest import drop_pg_schema, fresh_pg_schema
from tests.conftest import PG_DSN, require_postgres


def _d(row: str, hlc: int) -> RowDelta:
    return RowDelta.create("INSERT", "todos", row, "c1", {"n": hlc}, hlc)


def _publish(store: HotLog, gw: str, upto: int, bodies: list[bytes]) -> bool:
    for seq, body in enumerate(bodies):
        store.stage_checkpoint_chunk(gw, upto, seq, body)
    return store.publish_checkpoint(gw, upto, len(bodies), len(bodies) * 10)


def test_a_staged_checkpoint_is_served_only_once_published(store: HotLog) -> None:
    store.stage_checkpoint_chunk("gw1", 100, 0, b"a")
    assert store.checkpoint("gw1") is None
    assert store.publish_checkpoint("gw1", 100, 1, 3)
    cp = store.checkpoint("gw1")
    assert cp is not None and (cp.position, cp.chunks, cp.rows, cp.trimmed) == (100, 1, 3, 0)
    assert store.checkpoint_chunk("gw1", 100, 0) == b"a"
    assert store.checkpoint_chunk("gw1", 100, 1) is None
    assert store.checkpoint("gw2") is None


def test_the_previous_generation_stays_readable_until_the_next(store: HotLog) -> None:
    assert _publish(store, "gw1", 100, [b"a0", b"a1"])
    assert _publish(store, "gw1", 200, [b"b0"])
    cp = store.checkpoint("gw1")
    assert cp is not None and (cp.position, cp.previous) == (200, 100)
    assert store.checkpoint_chunk("gw1", 100, 1) == b"a1"  # a stream started on it goes on
    assert _publish(store, "gw1", 300, [b"c0"])
    assert store.checkpoint_chunk("gw1", 100, 0) is None
    assert store.checkpoint_chunk("gw1", 200, 0) == b"b0"


def test_an_older_checkpoint_is_not_published(store: HotLog) -> None:
    assert _publish(store, "gw1", 200, [b"new"])
    assert not _publish(store, "gw1", 150, [b"old"])
    cp = store.checkpoint("gw1")
    assert cp is not None and cp.position == 200
    assert store.checkpoint_chunk("gw1", 150, 0) is None
    assert store.checkpoint_chunk("gw1", 200, 0) == b"new"


def test_trimming_needs_a_checkpoint_and_the_flush(store: HotLog) -> None:
    stored = store.append("gw1", [_d(f"r{i}", 10 + i) for i in range(6)]).stored
    other = store.append("gw2", [_d("x", 30)]).stored
    ingest = [e.ingest_hlc for e in stored]
    assert store.trim_log("gw1", ingest[-1]) == 0  # no checkpoint yet
    _publish(store, "gw1", ingest[3], [b"c"])
    assert store.trim_log("gw1", ingest[-1]) == 0  # nothing flushed yet
    store.mark_flushed(ingest[1])
    assert store.trim_log("gw1", ingest[-1]) == 2  # up to the flushed position
    assert store.trimmed_through("gw1") == ingest[1]
    store.mark_flushed(other[0].ingest_hlc)
    assert store.trim_log("gw1", ingest[-1]) == 2  # up to the checkpoint's position
    assert store.trimmed_through("gw1") == ingest[3]
    assert [d.row_id for _, _, d in store.read_log(0, 100)] == ["r4", "r5", "x"]
    # Merged row states stay: resyncs and write checks still see every row.
    assert len(store.read_all_rows("gw1").rows) == 6
    assert store.trimmed_through("gw2") == 0


def test_trimming_goes_in_bounded_steps(store: HotLog) -> None:
    stored = store.append("gw1", [_d(f"r{i}", 10 + i) for i in range(7)]).stored
    last = stored[-1].ingest_hlc
    _publish(store, "gw1", last, [b"c"])
    store.mark_flushed(last)
    steps = []
    while (n := store.trim_log("gw1", last, limit=3)) > 0:
        steps.append((n, store.trimmed_through("gw1")))
    assert steps == [
        (3, stored[2].ingest_hlc),
        (3, stored[5].ingest_hlc),
        (1, last),
    ]
    assert store.read_log(0, 100) == []


def test_a_new_checkpoint_keeps_the_horizon(store: HotLog) -> None:
    stored = store.append("gw1", [_d(f"r{i}", 10 + i) for i in range(3)]).stored
    _publish(store, "gw1", stored[1].ingest_hlc, [b"c"])
    store.mark_flushed(stored[-1].ingest_hlc)
    store.trim_log("gw1", stored[1].ingest_hlc)
    _publish(store, "gw1", stored[2].ingest_hlc, [b"d"])
    assert store.trimmed_through("gw1") == stored[1].ingest_hlc


def test_rows_written_among_looks_up_only_the_given_rows(store: HotLog) -> None:
    store.append("gw1", [_d(f"r{i}", 10 + i) for i in range(3)])
    store.append("gw1", [RowDelta.create("UPDATE", "todos", "r9", "c2", {"n": 1}, 30)])
    store.append("gw2", [_d("r5", 40)])
    keys = [("todos", "r0"), ("todos", "r2"), ("todos", "r5"), ("todos", "r9"), ("x", "r1")]
    assert store.rows_written_among("gw1", "c1", keys) == {("todos", "r0"), ("todos", "r2")}
    assert store.rows_written_among("gw1", "c2", keys) == {("todos", "r9")}
    assert store.rows_written_among("gw1", "c1", []) == set()


def _log_entries_read(plan: dict[str, Any]) -> int:
    """Log rows a plan node and its children read (returned or filtered out), over all loops."""
    read = 0
    if plan.get("Relation Name") == "log":
        kept = plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0)
        read = (kept + plan.get("Rows Removed by Index Recheck", 0)) * plan["Actual Loops"]
    return read + sum(_log_entries_read(p) for p in plan.get("Plans", ()))


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
        store.append("gw1", [_d(f"r{i}", 10 + i) for i in range(2_000)])
        theirs = [
            RowDelta.create("INSERT", "todos", f"o{i}", "c2", {"n": i}, 5_000 + i)
            for i in range(50)
        ]
        store.append("gw1", theirs)
        keys = [("todos", d.row_id) for d in theirs]
        statements: list[tuple[Any, Any]] = []
        execute, caller = psycopg.Connection.execute, threading.get_ident()

        def recorded(conn: Any, query: Any, params: Any = None, **kw: Any) -> Any:
            if threading.get_ident() == caller:  # not the store's writer or listener
                statements.append((query, params))
            return execute(conn, query, params, **kw)

        monkeypatch.setattr(psycopg.Connection, "execute", recorded)
        assert store.rows_written_among("gw1", "c1", keys) == set()
        monkeypatch.undo()
        assert store.rows_written_among("gw1", "c2", keys) == set(keys)
        read = 0
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            for query, params in statements:
                explain = sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + sql.SQL(query)
                ((plan,),) = conn.execute(explain, params).fetchall()
                read += _log_entries_read(plan[0]["Plan"])
        assert statements and read <= len(keys)
    finally:
        store.close()
        drop_pg_schema(schema)
