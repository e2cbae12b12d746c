"""One behaviour suite for every HotLog implementation."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from lakesync.api.store.base import HotLog
from lakesync.api.store.postgres import PostgresHotLog
from lakesync.api.store.sqlite import SqliteHotLog
from lakesync.delta import RowDelta
from lakesync.hlc import HLC, wall_clock_ms
from lakesync.merge import merge_state
from lakesync.rules import lookups, parse_rules
from tests.api.conftest import drop_pg_schema, fresh_pg_schema
from tests.conftest import PG_DSN, require_postgres

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
    return RowDelta.create(op, "todos", row, client, cols, hlc)  # type: ignore[arg-type]


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


def _reopen(store: HotLog) -> HotLog:
    store.close()
    if isinstance(store, SqliteHotLog):
        return SqliteHotLog(store._path, HLC())
    assert isinstance(store, PostgresHotLog)
    return PostgresHotLog(store._dsn, HLC(), schema=store._schema, pool_size=2)


def test_entries_stored_before_the_hlc_column_are_filled_and_still_deduplicated(
    store: HotLog,
) -> None:
    a = d("INSERT", "r1", 10, title="a")
    b = d("UPDATE", "r1", 11, client="c2", title="b")
    store.append("gw1", [a, b])
    # What a store written before the client id and HLC columns existed holds.
    assert isinstance(store, SqliteHotLog | PostgresHotLog)
    store._write(lambda conn: store._execute(conn, "UPDATE log SET hlc = NULL, client_id = NULL"))
    again = _reopen(store)
    try:
        res = again.append("gw1", [a, b, d("INSERT", "r2", 12, title="c")])
        assert res.accepted == 3
        assert [e.delta.row_id for e in res.stored] == ["r2"]
        assert again.rows_written_by("gw1", "c2") == [("todos", "r1")]
    finally:
        again.close()


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


def test_rules_persist_with_a_fresh_stamp_per_change(store: HotLog) -> None:
    assert store.get_rules("gw1").rules is None and store.get_rules("gw1").stamp == 0
    head = store.append("gw1", [d("INSERT", "a", 1, x=1)]).head
    first = store.set_rules("gw1", RULES)
    assert first.stamp > head and store.get_rules("gw1") == first
    assert store.set_rules("gw1", RULES) == first  # unchanged: same stamp
    cleared = store.set_rules("gw1", None)
    assert cleared.rules is None and cleared.stamp > first.stamp
    assert store.get_rules("gw2").stamp == 0
    later = store.append("gw1", [d("INSERT", "b", 2, x=1)])
    assert later.stored[0].ingest_hlc > cleared.stamp


def test_docs_and_view_stamps(store: HotLog) -> None:
    store.put_doc("gw1", "schema", "todos", {"table": "todos", "columns": []})
    store.put_doc("gw1", "connector", "pg", {"name": "pg"})
    assert store.list_docs("gw1", "schema") == {"todos": {"table": "todos", "columns": []}}
    assert store.list_docs("gw2", "schema") == {}
    store.put_doc("gw0", "schema", "notes", {"table": "notes", "columns": []})
    assert store.docs_of_kind("schema") == [
        ("gw0", "notes", {"table": "notes", "columns": []}),
        ("gw1", "todos", {"table": "todos", "columns": []}),
    ]
    assert store.docs_of_kind("connector") == [("gw1", "pg", {"name": "pg"})]
    assert store.delete_doc("gw1", "connector", "pg")
    assert not store.delete_doc("gw1", "connector", "pg")
    assert store.view_stamp("gw1", "alice", "h1", {"sub": "alice", "team": "a"}) == 0
    assert store.view_stamp("gw1", "alice", "h1", {"sub": "alice", "team": "a"}) == 0
    changed = store.view_stamp("gw1", "alice", "h2", {"sub": "alice", "team": "b"})
    assert changed > 0
    assert store.view_stamp("gw1", "alice", "h2", {"sub": "alice", "team": "b"}) == changed


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


def test_view_history_keeps_every_rules_and_claims_version(store: HotLog) -> None:
    rules = [
        parse_rules({"version": 1, "buckets": [{"name": n, "tables": ["todos"], "filters": []}]})
        for n in ("one", "two")
    ]
    first = store.set_rules("gw1", rules[0]).stamp
    store.view_stamp("gw1", "alice", "h1", {"sub": "alice", "team": "a"})
    second = store.set_rules("gw1", rules[1]).stamp
    moved = store.view_stamp("gw1", "alice", "h2", {"sub": "alice", "team": "b"})
    assert 0 < first < second < moved
    # From before anything: every version; from a later point: the one in effect there first.
    assert store.view_history("gw1", "alice", 0) == (
        [(first, rules[0]), (second, rules[1])],
        [(0, {"sub": "alice", "team": "a"}), (moved, {"sub": "alice", "team": "b"})],
    )
    assert store.view_history("gw1", "alice", second) == (
        [(second, rules[1])],
        [(0, {"sub": "alice", "team": "a"}), (moved, {"sub": "alice", "team": "b"})],
    )
    assert store.view_history("gw1", "bob", moved) == ([(second, rules[1])], [])
    assert store.view_history("gw2", "alice", moved) == ([], [])


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
