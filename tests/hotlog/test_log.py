"""The log's behaviour suite (PushLog's appends, PullLog's pages, HotLogSource's reads, where
the log stands and the flusher's marks), run on every store (the ``store`` fixture: SQLite and
PostgreSQL)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from lakesync.hlc import HLC, wall_clock_ms
from lakesync.hotlog._sql import log as sql_log
from lakesync.hotlog.base import HotLog, encode_state
from lakesync.hotlog.postgres import PostgresHotLog
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.merge import RowState, merge_state
from tests.conftest import PG_DSN, drop_pg_schema, fresh_pg_schema, require_postgres
from tests.hotlog.common import another, d, insert


def test_append_assigns_increasing_ingest_and_dedups(store: HotLog) -> None:
    a = d("INSERT", "r1", 10, title="a")
    b = d("UPDATE", "r1", 11, title="b")
    res = store.append("gw1", [a, b, a])
    assert res.accepted == 3
    assert [e.delta for e in res.stored] == [a, b]
    assert res.stored[0].ingest_hlc < res.stored[1].ingest_hlc == res.head
    again = store.append("gw1", [b, d("INSERT", "r2", 12, title="c")])
    assert again.accepted == 2
    assert [e.delta.row_id for e in again.stored] == ["r2"]
    assert again.stored[0].ingest_hlc > res.head
    # Ingest stamps exceed the client HLCs they carry (synthetic clocks rely on it).
    assert all(e.ingest_hlc > e.delta.hlc for e in res.stored + again.stored)


def test_dedup_is_per_gateway(store: HotLog) -> None:
    a = d("INSERT", "r1", 10, title="a")
    store.append("gw1", [a])
    res = store.append("gw2", [a])
    assert len(res.stored) == 1
    assert [e.delta for e in store.read_page("gw2", 0, 10, False).entries] == [a]


def test_entries_stored_before_the_hlc_column_are_filled_and_still_deduplicated(
    store: HotLog,
) -> None:
    a = d("INSERT", "r1", 10, title="a")
    b = d("UPDATE", "r1", 11, client="c2", title="b")
    store.append("gw1", [a, b])
    # What a store written before the client id and HLC columns existed holds.
    assert isinstance(store, SqliteHotLog | PostgresHotLog)
    store._write(lambda conn: store._execute(conn, "UPDATE log SET hlc = NULL, client_id = NULL"))
    store.close()
    again = another(store)
    try:
        res = again.append("gw1", [a, b, d("INSERT", "r2", 12, title="c")])
        assert res.accepted == 3
        assert [e.delta.row_id for e in res.stored] == ["r2"]
        assert again.rows_written_by("gw1", "c2") == [("todos", "r1")]
    finally:
        again.close()


def test_read_page_pages_by_ingest_with_rows(store: HotLog) -> None:
    deltas = [d("INSERT", f"r{i}", 100 - i, title=str(i)) for i in range(5)]
    store.append("gw1", deltas[:3])
    store.append("gw1", deltas[3:])
    page = store.read_page("gw1", 0, 2, True)
    assert [e.delta for e in page.entries] == deltas[:2]
    assert page.has_more
    assert set(page.rows) == {("todos", "r0"), ("todos", "r1")}
    rest = store.read_page("gw1", page.entries[-1].ingest_hlc, 10, False)
    assert [e.delta for e in rest.entries] == deltas[2:]
    assert not rest.has_more and rest.rows == {}
    assert rest.head == rest.entries[-1].ingest_hlc
    ranged = store.read_range("gw1", page.entries[0].ingest_hlc, rest.entries[1].ingest_hlc)
    assert [e.delta for e in ranged.entries] == deltas[1:4]


def test_read_log_spans_gateways_in_order(store: HotLog) -> None:
    store.append("gw1", [d("INSERT", "a", 1, x=1)])
    store.append("gw2", [d("INSERT", "b", 2, x=2)])
    store.append("gw1", [d("INSERT", "c", 3, x=3)])
    log = store.read_log(0, 10)
    assert [(g, delta.row_id) for _, g, delta in log] == [("gw1", "a"), ("gw2", "b"), ("gw1", "c")]
    assert [i for i, _, _ in log] == sorted(i for i, _, _ in log)
    assert store.read_log(log[0][0], 1) == log[1:2]


def test_read_log_of_one_gateway(store: HotLog) -> None:
    a = store.append("gw1", [insert("a1", 10), insert("a2", 11)]).stored
    b = store.append("gw2", [insert("b1", 12)]).stored
    c = store.append("gw1", [insert("a3", 13)]).stored
    everything = store.read_log(0, 100)
    assert [(i, g) for i, g, _ in everything] == [(e.ingest_hlc, e.gateway_id) for e in a + b + c]
    mine = store.read_log(a[0].ingest_hlc, 1, gateway_id="gw1")
    assert [(i, d.row_id) for i, _, d in mine] == [(a[1].ingest_hlc, "a2")]
    assert [d.row_id for _, _, d in store.read_log(0, 100, gateway_id="gw1")] == ["a1", "a2", "a3"]
    assert store.read_log(0, 100, gateway_id="nobody") == []


def test_flushed_position_and_unflushed_bytes(store: HotLog) -> None:
    assert store.unflushed_bytes() == 0
    res = store.append("gw1", [d("INSERT", "a", 1, x=1), d("INSERT", "b", 2, x=2)])
    total = store.unflushed_bytes()
    assert total > 0
    store.mark_flushed(res.stored[0].ingest_hlc)
    assert store.flushed_position() == res.stored[0].ingest_hlc
    assert 0 < store.unflushed_bytes() < total
    store.mark_flushed(res.head)
    store.mark_flushed(1)  # never moves backwards
    assert store.flushed_position() == res.head
    assert store.unflushed_bytes() == 0


def test_a_failing_batch_stores_nothing_and_concurrent_batches_go_on(
    store: HotLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_encode(state: RowState) -> bytes:
        # Fails after the batch's log rows are written: the whole batch must roll back.
        if "boom" in state.cells:
            raise RuntimeError("row state cannot be stored")
        return encode_state(state)

    monkeypatch.setattr(sql_log, "encode_state", failing_encode)
    batches = [[d("INSERT", f"w{w}-{i}", 1, f"c{w}", x=i) for i in range(3)] for w in range(8)]
    batches[3].append(d("INSERT", "w3-bad", 1, "c3", boom=1))
    start = threading.Barrier(len(batches))
    errors: dict[int, BaseException] = {}

    def push(worker: int) -> None:
        start.wait()
        try:
            store.append("gw1", batches[worker])
        except RuntimeError as exc:
            errors[worker] = exc

    threads = [threading.Thread(target=push, args=(w,)) for w in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert list(errors) == [3]
    log = store.read_log(0, 1000)
    stored = {delta.delta_id for _, _, delta in log}
    assert stored == {x.delta_id for w, b in enumerate(batches) if w != 3 for x in b}
    assert store.head() == log[-1][0]
    assert set(store.read_all_rows("gw1").rows) == {("todos", x.row_id) for _, _, x in log}
    # The failed batch left no trace: its good deltas are new on a retry, stamped after the rest.
    retry = store.append("gw1", batches[3][:3])
    assert len(retry.stored) == 3
    assert retry.stored[0].ingest_hlc > log[-1][0]


def test_concurrent_appends_keep_every_delta_once(store: HotLog) -> None:
    def push(worker: int) -> None:
        for i in range(10):
            batch = [
                d("INSERT", f"w{worker}-{i}-{j}", 1000 + j, client=f"c{worker}", x=j)
                for j in range(5)
            ]
            store.append("gw1", batch + batch[:2])

    threads = [threading.Thread(target=push, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log = store.read_log(0, 10_000)
    assert len(log) == 6 * 10 * 5
    assert len({delta.delta_id for _, _, delta in log}) == len(log)
    ingests = [i for i, _, _ in log]
    assert ingests == sorted(set(ingests))
    rows = store.read_all_rows("gw1")
    assert len(rows.rows) == len(log)
    assert {k: r.state.visible() for k, r in rows.rows.items()} == merge_state(
        delta for _, _, delta in log
    )


def test_readers_never_see_gaps_under_concurrent_appends(store: HotLog) -> None:
    """A reader paging by cursor during concurrent appends ends up with every entry."""
    stop = threading.Event()
    seen: list[int] = []

    def reader() -> None:
        cursor = 0
        while True:
            done = stop.is_set()
            page = store.read_page("gw1", cursor, 7, False)
            seen.extend(e.ingest_hlc for e in page.entries)
            if page.entries:
                cursor = page.entries[-1].ingest_hlc
            elif done:
                return

    def writer(worker: int) -> None:
        for i in range(15):
            store.append("gw1", [d("INSERT", f"w{worker}-{i}-{j}", 1, x=j) for j in range(3)])

    r = threading.Thread(target=reader)
    r.start()
    writers = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    r.join()
    assert sorted(seen) == seen
    assert seen == [i for i, _, _ in store.read_log(0, 10_000)]


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_group_commit_shares_transactions(tmp_path: Path, kind: str) -> None:
    """Appends that arrive while a group is being committed are committed together afterwards,
    in one transaction (one commit, one fsync), however fast the machine is."""
    stalled, go = threading.Event(), threading.Event()

    def physical() -> int:  # the writer reads the clock inside the first group's transaction
        if not go.is_set():
            stalled.set()
            go.wait()
        return wall_clock_ms()

    schema = fresh_pg_schema()
    store: SqliteHotLog | PostgresHotLog
    if kind == "sqlite":
        store = SqliteHotLog(tmp_path / "hot.sqlite3", HLC(physical))
    else:
        require_postgres()
        store = PostgresHotLog(PG_DSN, HLC(physical), schema=schema, pool_size=4)

    def push(worker: int) -> None:
        store.append("gw1", [d("INSERT", f"w{worker}", 1, client=f"c{worker}", x=worker)])

    first = threading.Thread(target=push, args=(0,))
    first.start()
    stalled.wait()
    others = [threading.Thread(target=push, args=(w,)) for w in range(1, 9)]
    for t in others:
        t.start()
    while store._writes._queue.qsize() < 8:  # the eight wait behind the stalled group
        time.sleep(0.01)
    committed = store._writes.groups_committed
    go.set()
    for t in [first, *others]:
        t.join()
    try:
        assert len(store.read_log(0, 1000)) == 9
        # The first append alone, then the eight together.
        assert store._writes.groups_committed == committed + 2
    finally:
        store.close()
        if kind == "postgres":
            drop_pg_schema(schema)
