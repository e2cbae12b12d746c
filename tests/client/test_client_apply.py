"""Applying remote deltas to the replica: column LWW, tombstones, atomic pages, watches."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync.client import Change, LakeSyncClient
from lakesync.client._store import LocalStore
from lakesync.client.errors import SchemaError
from lakesync.delta import VIEW_EVICTION_CLIENT, Op, RowDelta
from lakesync.hlc import HLC, encode
from lakesync.merge import RowState, decode_row_state, merge_state
from lakesync.schema import parse_schema

SCHEMA = parse_schema(
    {
        "table": "t",
        "columns": [
            {"name": "a", "type": "string"},
            {"name": "b", "type": "number"},
            {"name": "c", "type": "boolean"},
        ],
    }
)
BASE = encode(1_700_000_000_000, 0)


def d(op: Op, row: str, client: str, hlc: int, **cols: Any) -> RowDelta:
    return RowDelta.create(op, "t", row, client, cols, BASE + hlc)


def store(path: str = ":memory:") -> LocalStore:
    return LocalStore(path, [SCHEMA])


def versions(s: LocalStore) -> dict[str, int]:
    """Each local table's schema version (1 on creation, +1 per added column)."""
    return {r["tbl"]: r["version"] for r in s.query("select tbl, version from _ls_schemas")}


def rows(s: LocalStore) -> dict[str, dict[str, Any]]:
    out = {}
    for r in s.query("select * from t"):
        rid = r.pop("row_id")
        out[rid] = {k: v for k, v in r.items() if v is not None}
    return out


def test_remote_delta_never_overwrites_newer_local_cell() -> None:
    s, clock = store(), HLC()
    s.apply_remote([d("INSERT", "r", "x", 10, a="old", b=1)], "remote", clock)
    # A late delta: loses column a (older), wins column c (new), and must keep c.
    s.apply_remote([d("INSERT", "r", "x", 20, a="new")], "remote", clock)
    s.apply_remote([d("UPDATE", "r", "y", 15, a="late", c=True)], "remote", clock)
    assert rows(s) == {"r": {"a": "new", "b": 1, "c": True}}


def test_equal_hlc_breaks_tie_by_client_id() -> None:
    s, clock = store(), HLC()
    s.apply_remote([d("INSERT", "r", "b-client", 5, a="B")], "remote", clock)
    s.apply_remote([d("INSERT", "r", "a-client", 5, a="A")], "remote", clock)
    assert rows(s) == {"r": {"a": "B"}}


def test_insert_of_existing_row_merges_and_update_of_deleted_row_revives_only_if_newer() -> None:
    s, clock = store(), HLC()
    s.apply_remote([d("INSERT", "r", "x", 10, a="one", b=1)], "remote", clock)
    s.apply_remote([d("INSERT", "r", "y", 11, b=2)], "remote", clock)
    assert rows(s) == {"r": {"a": "one", "b": 2}}
    s.apply_remote([d("DELETE", "r", "x", 20)], "remote", clock)
    s.apply_remote([d("UPDATE", "r", "y", 19, a="stale")], "remote", clock)
    assert rows(s) == {}
    s.apply_remote([d("UPDATE", "r", "y", 21, c=False)], "remote", clock)
    # Revived: only the cell written after the tombstone is visible.
    assert rows(s) == {"r": {"c": False}}
    assert s.query("select a, b, c from t") == [{"a": None, "b": None, "c": False}]


def test_delete_wins_an_exact_tie() -> None:
    s, clock = store(), HLC()
    s.apply_remote([d("INSERT", "r", "x", 10, a="v"), d("DELETE", "r", "x", 10)], "remote", clock)
    assert rows(s) == {}


def test_page_and_cursor_commit_together() -> None:
    s, clock = store(), HLC()
    s.apply_remote([d("INSERT", "r1", "x", 1, a="1")], "remote", clock, ("gw", 100))
    assert s.cursor("gw") == 100

    class CrashError(Exception):
        pass

    bad = d("INSERT", "r2", "x", 2, a="2")
    original = s.rows._save_state

    def failing_save(c: Any, touched: dict[tuple[str, str], Any]) -> None:
        original(c, touched)
        if ("t", "r3") in touched:
            raise CrashError

    s.rows._save_state = failing_save  # type: ignore[method-assign,assignment]
    with pytest.raises(CrashError):
        s.apply_remote([bad, d("INSERT", "r3", "x", 3, a="3")], "remote", clock, ("gw", 200))
    assert s.cursor("gw") == 100
    assert set(rows(s)) == {"r1"}
    assert s.row_state("t", "r2").write is None


def test_remote_unknown_table_and_columns_are_created() -> None:
    s, clock = store(), HLC()
    s.apply_remote(
        [
            RowDelta.create("INSERT", "notes", "n1", "x", {"body": "hi", "pinned": True}, BASE),
            d("UPDATE", "r", "x", 1, a="v", extra={"k": [1]}),
        ],
        "remote",
        clock,
    )
    assert s.query("select * from notes") == [{"row_id": "n1", "body": "hi", "pinned": True}]
    assert s.query("select extra from t") == [{"extra": {"k": [1]}}]
    assert versions(s) == {"t": 2, "notes": 1}
    assert s.schema("t").column_types()["extra"] == "json"


def test_remote_deltas_advance_the_local_clock() -> None:
    s, clock = store(), HLC(physical=lambda: 1_700_000_000_000)
    far = encode(1_700_000_000_000 + 4_000, 7)
    s.apply_remote([RowDelta.create("INSERT", "t", "r", "x", {"a": "v"}, far)], "remote", clock)
    assert clock.now() > far


def test_hlc_above_2_63_round_trips() -> None:
    s, clock = store(), HLC()
    huge = (1 << 64) - 5
    s.apply_remote(
        [RowDelta.create("INSERT", "t", "r", "x", {"a": "v"}, huge)], "remote", clock, ("gw", huge)
    )
    assert s.row_state("t", "r").cells["a"].hlc == huge
    assert s.cursor("gw") == huge


OPS = st.tuples(
    st.sampled_from(["INSERT", "UPDATE", "DELETE"]),
    st.sampled_from(["r1", "r2"]),
    st.sampled_from(["c1", "c2", "c3"]),
    st.integers(0, 6),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 3), max_size=3),
)


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(OPS, max_size=14), data=st.data())
def test_replica_equals_core_merge_in_any_order_and_page_split(
    ops: list[tuple[str, str, str, int, dict[str, int]]], data: st.DataObject
) -> None:
    deltas = []
    for op, row, client, h, cols in ops:
        values: dict[str, Any] = {}
        if op != "DELETE":
            values = {
                k: (f"s{v}" if k == "a" else v if k == "b" else v % 2 == 0) for k, v in cols.items()
            }
        deltas.append(RowDelta.create(op, "t", row, client, values, BASE + h))  # type: ignore[arg-type]
    expected = {
        k[1]: {c: v for c, v in row.items() if v is not None}
        for k, row in merge_state(deltas).items()
    }
    shuffled = data.draw(st.permutations(deltas + deltas[: len(deltas) // 2]))
    cut = data.draw(st.integers(0, len(shuffled)))
    s, clock = store(), HLC()
    s.apply_remote(shuffled[:cut], "remote", clock)
    for one in shuffled[cut:]:
        s.apply_remote([one], "remote", clock)
    assert rows(s) == expected


def test_watch_callbacks_and_query_watch() -> None:
    with LakeSyncClient(
        ":memory:",
        client_id="me",
        schemas=[{"table": "t", "columns": [{"name": "a", "type": "string"}]}],
    ) as c:
        seen: list[list[Change]] = []
        results: list[list[dict[str, Any]]] = []
        w = c.watch("t", seen.append)
        qw = c.watch_query("select row_id, a from t order by row_id", (), results.append)
        c.insert("t", "r1", {"a": "x"})
        c.update("t", "r1", {"a": "y"})
        c._store.apply_remote(
            [RowDelta.create("DELETE", "t", "r1", "zz", {}, c._clock.now())], "remote", c._clock
        )
        assert [[ch.kind for ch in batch] for batch in seen] == [["insert"], ["update"]]
        assert results == [[], [{"row_id": "r1", "a": "x"}], [{"row_id": "r1", "a": "y"}]]
        w.cancel()
        qw.cancel()
        c.insert("t", "r2", {"a": "z"})
        assert len(seen) == 2 and len(results) == 3


def test_async_iteration_over_watch() -> None:
    async def main() -> list[list[str]]:
        with LakeSyncClient(
            ":memory:",
            client_id="me",
            schemas=[{"table": "t", "columns": [{"name": "a", "type": "string"}]}],
        ) as c:
            w = c.watch("t")
            c.insert("t", "r0", {"a": "before iteration"})
            got: list[list[str]] = []

            async def consume() -> None:
                async for batch in w:
                    got.append([ch.row_id for ch in batch])
                    if len(got) == 3:
                        w.cancel()

            task = asyncio.create_task(consume())
            await asyncio.sleep(0)
            await asyncio.to_thread(c.insert, "t", "r1", {"a": "from a thread"})
            c.insert("t", "r2", {"a": "x"})
            await asyncio.wait_for(task, 5)
            return got

    assert asyncio.run(main()) == [["r0"], ["r1"], ["r2"]]


def test_crash_reopen_keeps_consistent_state(tmp_path: Path) -> None:
    path = str(tmp_path / "x.db")
    s, clock = store(path), HLC()
    s.apply_remote([d("INSERT", "r", "x", 1, a="v")], "remote", clock, ("gw", 5))
    s.close()
    s2 = store(path)
    assert s2.cursor("gw") == 5 and rows(s2) == {"r": {"a": "v"}}


CHILD_APPLY = """
import os, signal, sys
from lakesync.client._store import LocalStore
from lakesync.client.errors import SchemaError
from lakesync.delta import RowDelta
from lakesync.hlc import HLC, encode
from lakesync.schema import parse_schema

schema = parse_schema({"table": "t", "columns": [{"name": "a", "type": "string"}]})
s = LocalStore(sys.argv[1], [schema])
base = encode(1_700_000_000_000, 0)
page = lambda lo, hi: [
    RowDelta.create("INSERT", "t", f"r{i}", "x", {"a": str(i)}, base + i) for i in range(lo, hi)
]
s.apply_remote(page(0, 10), "remote", HLC(), ("gw", 10))
saved = 0
real_save = s.rows._show

def save_then_die(*args):
    # The second page is fully written inside its transaction, not yet committed.
    global saved
    real_save(*args)
    saved += 1
    if saved == 1:
        os.kill(os.getpid(), signal.SIGKILL)

s.rows._show = save_then_die
s.apply_remote(page(10, 20), "remote", HLC(), ("gw", 20))
"""


def test_kill_9_during_page_apply_keeps_replica_and_cursor_consistent(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    path = str(tmp_path / "crash.db")
    proc = subprocess.run([sys.executable, "-c", CHILD_APPLY, path], check=False, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    s = store(path)
    # The second page was written but not committed when the process died: none of it is
    # visible, and the cursor still points at the first page, so the next pull fetches it again.
    assert s.cursor("gw") == 10
    assert sorted(rows(s)) == sorted(f"r{i}" for i in range(10))
    assert s.row_state("t", "r10").write is None
    assert s.query("select count(*) as n from _ls_rows")[0]["n"] == 10


def test_remote_names_that_collide_locally_never_block_a_page(tmp_path: Path) -> None:
    path = str(tmp_path / "r.db")
    s, clock = store(path), HLC()
    deltas = [
        RowDelta.create("INSERT", "_ls_outbox", "x", "evil", {"body": "x"}, BASE + 1),
        RowDelta.create("INSERT", "T", "x", "other", {"a": "case twin"}, BASE + 2),
        RowDelta.create(
            "INSERT", "t", "r", "x", {"a": "ok", "A": "twin", "ROW_ID": "no"}, BASE + 3
        ),
    ]
    s.apply_remote(deltas, "remote", clock, ("gw", 9))
    assert s.cursor("gw") == 9
    assert s.query("select * from t") == [{"row_id": "r", "a": "ok", "b": None, "c": None}]
    assert set(s.row_state("t", "r").cells) == {"a", "A", "ROW_ID"}
    assert s.queue_depth() == 0
    s.close()
    with pytest.raises(SchemaError, match="only in case"):
        LocalStore(path, [SCHEMA, parse_schema({"table": "T", "columns": []})])


def test_query_watch_reruns_only_for_tables_it_reads() -> None:
    two = [
        {"table": "t", "columns": [{"name": "a", "type": "string"}]},
        {"table": "u", "columns": [{"name": "a", "type": "string"}]},
    ]
    with LakeSyncClient(":memory:", client_id="me", schemas=two) as c:
        runs: list[str] = []
        real = c._store.query_tables

        def counting(sql: str, params: Any) -> Any:
            runs.append(sql)
            return real(sql, params)

        c._session.watchers._run_query = counting
        results: list[Any] = []
        c.watch_query("select count(*) as n from T", (), results.append)
        c.insert("u", "x", {"a": "other table"})
        assert len(runs) == 1  # the write to u did not re-run a query on t
        c.insert("t", "y", {"a": "mine"})
        assert len(runs) == 2 and results == [[{"n": 0}], [{"n": 1}]]


def evict(row: str, base: int) -> RowDelta:
    return RowDelta.create("DELETE", "t", row, VIEW_EVICTION_CLIENT, {}, BASE + base)


def test_pending_writes_stay_on_top_of_snapshots_until_a_pull_sends_them_back() -> None:
    s, clock = store(), HLC()
    s.apply_remote([evict("r", 10), d("INSERT", "r", "x", 5, a="old", b=1)], "remote", clock)
    mine, _ = s.write("UPDATE", "t", "r", {"a": "mine"}, clock, "me") or (None, None)
    assert mine is not None
    # A snapshot of the row with another writer's newer cell b, but an older a: mine stays.
    snap = [evict("r", 20), d("INSERT", "r", "y", 19, b=2), d("UPDATE", "r", "x", 5, a="old")]
    s.apply_remote(snap, "remote", clock)
    assert rows(s) == {"r": {"a": "mine", "b": 2}}
    # Acknowledged: no longer pushed, still shown; a stale broadcast cannot hide it.
    (entry,) = s.outbox(10, 1 << 20)
    s.ack([entry.seq], BASE + 30)
    assert s.queue_depth() == 0 and s.outbox(10, 1 << 20) == []
    s.apply_remote([evict("r", 21), d("INSERT", "r", "y", 19, b=2)], "realtime", clock)
    assert rows(s) == {"r": {"a": "mine", "b": 2}}
    # A pull past the ack brings the row back with the write in it; the entry is dropped.
    back = [evict("r", 31), RowDelta.create("INSERT", "t", "r", "me", {"a": "mine", "b": 2},
                                            mine.hlc)]
    s.apply_remote(back, "remote", clock, ("gw", BASE + 31))
    assert rows(s) == {"r": {"a": "mine", "b": 2}}
    assert s.query("select count(*) as n from _ls_outbox")[0]["n"] == 0


def test_a_stale_snapshot_is_skipped_and_an_eviction_forgets_the_row() -> None:
    s, clock = store(), HLC()
    s.apply_remote([evict("r", 20), d("INSERT", "r", "x", 19, a="v2")], "remote", clock)
    # A broadcast of an older state, overtaken by the pull above: skipped as a whole.
    s.apply_remote([evict("r", 10), d("INSERT", "r", "x", 9, a="v1", b=1)], "realtime", clock)
    assert rows(s) == {"r": {"a": "v2"}}
    # The row leaves the view: gone, clocks and all; a pending write of it still shows alone.
    s.write("UPDATE", "t", "r", {"b": 7}, clock, "me")
    s.apply_remote([evict("r", 30)], "remote", clock)
    assert rows(s) == {"r": {"b": 7}}
    assert [decode_row_state(r["state"]) for r in s.query("select state from _ls_rows")] == [
        RowState()
    ]
    # Refused for good: the row shows what the gateway sent, i.e. nothing.
    (entry,) = s.outbox(10, 1 << 20)
    changes = s.dead_letter(entry, "FORBIDDEN", "not visible")
    assert rows(s) == {} and [c.after for c in changes] == [None]
    # Requeued: shown again.
    assert s.requeue_dead_letters()[0] == 1 and rows(s) == {"r": {"b": 7}}


# The replica layout before row states were kept as one encoded RowState per row: clocks in
# columns of _ls_rows, one row of _ls_cells per cell (and no view_base before that).
OLD_LAYOUT = """
CREATE TABLE _ls_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE _ls_rows (
    tbl TEXT NOT NULL, row_id TEXT NOT NULL,
    write_hlc INTEGER, write_client TEXT, tomb_hlc INTEGER, tomb_client TEXT,
    PRIMARY KEY (tbl, row_id)) WITHOUT ROWID;
CREATE TABLE _ls_cells (
    tbl TEXT NOT NULL, row_id TEXT NOT NULL, col TEXT NOT NULL,
    value TEXT NOT NULL, hlc INTEGER NOT NULL, client_id TEXT NOT NULL,
    PRIMARY KEY (tbl, row_id, col)) WITHOUT ROWID;
CREATE TABLE _ls_outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, delta_id TEXT NOT NULL UNIQUE,
    body BLOB NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT);
"""


def test_a_replica_in_the_per_cell_layout_opens_with_its_states_and_pending_writes(
    tmp_path: Path,
) -> None:
    import sqlite3

    from lakesync.wire import encode_delta

    path = str(tmp_path / "old.db")
    big = (1 << 64) - 5  # an HLC above the signed range, stored negative by the old layout
    pending = d("UPDATE", "r1", "me", 50, b=9)
    with sqlite3.connect(path) as old:
        old.executescript(OLD_LAYOUT)
        old.executemany(
            "INSERT INTO _ls_rows VALUES (?, ?, ?, ?, ?, ?)",
            [
                ("t", "r1", BASE + 30, "x", BASE + 10, "y"),
                ("t", "r2", big - (1 << 64), "z", None, None),
                ("t", "gone", None, None, BASE + 40, "y"),
            ],
        )
        old.executemany(
            "INSERT INTO _ls_cells VALUES (?, ?, ?, ?, ?, ?)",
            [
                ("t", "r1", "a", '"kept"', BASE + 30, "x"),
                ("t", "r1", "b", "1", BASE + 5, "x"),  # older than the tombstone: reads null
                ("t", "r2", "c", "true", big - (1 << 64), "z"),
            ],
        )
        old.execute(
            "INSERT INTO _ls_outbox (delta_id, body) VALUES (?, ?)",
            (pending.delta_id, encode_delta(pending)),
        )
    old.close()
    s = store(path)
    assert s.row_state("t", "r2").write == (big, "z")
    assert s.row_state("t", "gone").live is False
    # The acknowledged state with the pending write merged on top, as before the upgrade.
    assert s.get("t", "r1") == {"a": "kept", "b": 9}
    assert s.get("t", "r2") == {"c": True}
    clock = HLC()
    s.apply_remote([d("UPDATE", "r1", "x", 60, a="newer")], "remote", clock)
    assert s.get("t", "r1") == {"a": "newer", "b": 9}
    assert [e.delta for e in s.outbox(10, 1 << 20)] == [pending]
    s.close()
    # Opening it again finds the new layout: nothing to fold twice.
    again = store(path)
    assert again.get("t", "r1") == {"a": "newer", "b": 9}
    assert again.query("select name from sqlite_master where name = '_ls_cells'") == []


def test_a_batch_nobody_watches_builds_no_changes_and_applies_the_same() -> None:
    # The engine asks ``watched`` in the transaction: a first sync without a watch spends
    # nothing on Change objects, and the replica ends the same as with one.
    pages = [
        [d("INSERT", f"r{i}", "x", i, a=str(i), b=i) for i in range(0, 6)],
        [d("INSERT", f"r{i}", "x", i, a=str(i), b=i) for i in range(6, 12)],
        [d("UPDATE", "r3", "y", 50, a="late"), d("DELETE", "r7", "y", 51)],
    ]
    unwatched, watched = store(), store()
    clock = HLC()
    for page in pages:
        assert unwatched.apply_remote(page, "remote", clock, watched=lambda: False) == []
        changes = watched.apply_remote(page, "remote", clock, watched=lambda: True)
        assert {c.row_id for c in changes} == {x.row_id for x in page}
    assert rows(unwatched) == rows(watched)
    assert "r7" not in rows(unwatched) and rows(unwatched)["r3"]["a"] == "late"


def test_changes_are_built_while_a_watch_is_registered(tmp_path: Path) -> None:
    with LakeSyncClient(str(tmp_path / "r.db"), schemas=[SCHEMA]) as c:
        assert not c._session.watchers.watching()
        w = c.watch("t", lambda changes: None)
        assert c._session.watchers.watching()
        changes = c._store.apply_remote(
            [d("INSERT", "r1", "x", 1, a="v")],
            "remote",
            HLC(),
            watched=c._session.watchers.watching,
        )
        assert [ch.row_id for ch in changes] == ["r1"]
        w.cancel()
        assert not c._session.watchers.watching()
