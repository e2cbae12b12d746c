"""A broadcast applied while a checkpoint downloads is newer than the checkpoint: checkpoint
frames send a row the client sees without a view eviction (docs/protocol.md §12), so the
replica itself keeps the newer snapshot the broadcast left (a row that left the view stays
gone, a row updated keeps its update), as the frame's older eviction used to make it; rows
with no newer eviction take the frame's state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lakesync.client._store import LocalStore
from lakesync.delta import VIEW_EVICTION_CLIENT, RowDelta
from lakesync.hlc import HLC, encode
from lakesync.schema import parse_schema

SCHEMA = parse_schema({"table": "t", "columns": [{"name": "s", "type": "string"}]})
BASE = encode(1_700_000_000_000, 0)
POSITION = BASE + 1_000  # the checkpoint's position: it holds every delta ingested up to it


def eviction(row_id: str, hlc: int) -> RowDelta:
    return RowDelta.of_stored("DELETE", "t", row_id, VIEW_EVICTION_CLIENT, {}, hlc)


def frame() -> list[RowDelta]:
    """A checkpoint frame: three rows the client sees, each as its real state alone."""
    return [
        RowDelta.create("INSERT", "t", r, "w", {"s": f"{r} at checkpoint"}, BASE + i)
        for i, r in enumerate(("left", "moved", "plain"))
    ]


def replica(tmp_path: Path, name: str) -> tuple[LocalStore, HLC]:
    return LocalStore(str(tmp_path / name), [SCHEMA]), HLC()


def rows(store: LocalStore) -> dict[str, Any]:
    return {r["row_id"]: r["s"] for r in store.query("select row_id, s from t")}


def test_a_broadcast_newer_than_the_checkpoint_keeps_its_rows(tmp_path: Path) -> None:
    store, clock = replica(tmp_path, "r.db")
    # While the checkpoint downloads: "left" leaves the view; "moved" is updated (a snapshot:
    # its eviction, then its real state); both ingested after the checkpoint's position.
    store.apply_remote([eviction("left", POSITION + 50)], "realtime", clock)
    store.apply_remote(
        [
            eviction("moved", POSITION + 60),
            RowDelta.create("INSERT", "t", "moved", "w", {"s": "moved later"}, POSITION + 55),
        ],
        "realtime",
        clock,
    )
    store.apply_remote(frame(), "remote", clock, checkpoint_at=POSITION)
    store.apply_remote([], "remote", clock, ("gw", POSITION))
    # The pull from the position sends the two snapshots again: stale now, skipped.
    store.apply_remote([eviction("left", POSITION + 50)], "remote", clock, ("gw", POSITION + 70))
    assert rows(store) == {"moved": "moved later", "plain": "plain at checkpoint"}


def test_without_the_position_the_frame_would_bring_back_a_row_that_left_the_view(
    tmp_path: Path,
) -> None:
    """What the position guards against: merged as plain deltas, the frame's real state revives
    the row the broadcast evicted, and the pull's snapshot of it, stale, cannot remove it."""
    store, clock = replica(tmp_path, "r.db")
    store.apply_remote([eviction("left", POSITION + 50)], "realtime", clock)
    store.apply_remote(frame(), "remote", clock)
    store.apply_remote([eviction("left", POSITION + 50)], "remote", clock, ("gw", POSITION + 70))
    assert "left" in rows(store)


def test_evictions_older_than_the_checkpoint_do_not_hold_its_rows_back(tmp_path: Path) -> None:
    """A replica that resyncs holds rows evicted before the position (an earlier view): the
    frame's states apply to them."""
    store, clock = replica(tmp_path, "r.db")
    store.apply_remote(
        [eviction("left", POSITION - 10), eviction("plain", POSITION)], "remote", clock
    )
    store.apply_remote(frame(), "remote", clock, checkpoint_at=POSITION)
    assert rows(store) == {r: f"{r} at checkpoint" for r in ("left", "moved", "plain")}
