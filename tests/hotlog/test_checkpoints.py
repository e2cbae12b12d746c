"""Checkpoints and trimming (the ports CheckpointSink, CheckpointServing and LogMaintenance):
checkpoint generations and hot-log trimming, run on every store (the ``store`` fixture: SQLite
and PostgreSQL)."""

from __future__ import annotations

from typing import Any

from lakesync.delta import RowDelta
from lakesync.hotlog.base import HotLog
from tests.hotlog.common import insert


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
    stored = store.append("gw1", [insert(f"r{i}", 10 + i) for i in range(6)]).stored
    other = store.append("gw2", [insert("x", 30)]).stored
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


def test_the_horizon_moves_only_as_far_as_entries_were_deleted(store: HotLog) -> None:
    # Another gateway's entries move the flushed position past this gateway's checkpoint.
    other = store.append("gw2", [insert(f"x{i}", 10 + i) for i in range(3)]).stored
    _publish(store, "gw1", other[1].ingest_hlc, [b"c"])
    store.mark_flushed(other[-1].ingest_hlc)
    assert store.trim_log("gw1", other[-1].ingest_hlc) == 0
    assert store.trimmed_through("gw1") == 0  # nothing went: a first pull (since=0) still works
    mine = store.append("gw1", [insert("r0", 40)]).stored
    later = store.append("gw2", [insert("y", 50)]).stored
    _publish(store, "gw1", later[0].ingest_hlc, [b"d"])
    store.mark_flushed(later[0].ingest_hlc)
    assert store.trim_log("gw1", later[0].ingest_hlc) == 1
    # Through the entry deleted, not through the checkpoint's position beyond it.
    assert store.trimmed_through("gw1") == mine[0].ingest_hlc
    assert store.trim_log("gw1", later[0].ingest_hlc) == 0
    assert store.trimmed_through("gw1") == mine[0].ingest_hlc


def test_trimming_the_whole_log_never_moves_its_head_back(store: HotLog) -> None:
    """Ingest stamps only grow: with every entry trimmed, the store's head (from which the next
    stamp is taken, whatever a writer's clock says) stays at the last entry deleted."""
    stored = store.append("gw1", [insert(f"r{i}", 10 + i) for i in range(3)]).stored
    last = stored[-1].ingest_hlc
    _publish(store, "gw1", last, [b"c"])
    store.mark_flushed(last)
    assert store.trim_log("gw1", last) == 3
    assert store.read_log(0, 100) == []
    assert store.committed_head() >= last


def test_trimming_goes_in_bounded_steps(store: HotLog) -> None:
    stored = store.append("gw1", [insert(f"r{i}", 10 + i) for i in range(7)]).stored
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
    stored = store.append("gw1", [insert(f"r{i}", 10 + i) for i in range(3)]).stored
    _publish(store, "gw1", stored[1].ingest_hlc, [b"c"])
    store.mark_flushed(stored[-1].ingest_hlc)
    store.trim_log("gw1", stored[1].ingest_hlc)
    _publish(store, "gw1", stored[2].ingest_hlc, [b"d"])
    assert store.trimmed_through("gw1") == stored[1].ingest_hlc


def test_trimming_keeps_what_the_trimmed_entries_tell_views(store: HotLog) -> None:
    """Row histories and the rows each client wrote read the same before and after trimming, in
    bounded steps and with rows written by several clients across the horizon."""
    deltas = [
        RowDelta.create("INSERT", "todos", "r0", "c1", {"owner": "a", "n": 1}, 10),
        RowDelta.create("INSERT", "todos", "r1", "c2", {"owner": "b"}, 11),
        RowDelta.create("UPDATE", "todos", "r0", "c2", {"owner": "b"}, 12),
        RowDelta.create("DELETE", "todos", "r1", "c1", {}, 13),
        RowDelta.create("UPDATE", "notes", "r0", "c3", {"n": 2}, 14),
        RowDelta.create("UPDATE", "todos", "r0", "c1", {"n": 3}, 15),
        RowDelta.create("UPDATE", "todos", "r1", "c2", {"owner": "c"}, 16),
    ]
    ingest = [store.append("gw1", [d]).head for d in deltas]
    keys = [("todos", "r0"), ("todos", "r1"), ("notes", "r0"), ("todos", "none")]
    cursor, head = ingest[4], ingest[-1]

    def views() -> Any:
        written = {c: sorted(store.rows_written_by("gw1", c)) for c in ("c1", "c2", "c3")}
        among = {c: store.rows_written_among("gw1", c, keys) for c in ("c1", "c2", "c3")}
        few = {c: store.rows_written_if_few("gw1", c, 10) for c in ("c1", "c2", "c3")}
        return store.row_history("gw1", keys, cursor, head), written, among, few

    before = views()
    _publish(store, "gw1", cursor, [b"c"])
    store.mark_flushed(head)
    while store.trim_log("gw1", cursor, limit=2) > 0:
        pass
    assert [d.hlc for _, _, d in store.read_log(0, 100)] == [15, 16]
    assert views() == before
