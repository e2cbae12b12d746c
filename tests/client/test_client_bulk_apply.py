"""A first sync's bulk writes (checkpoint frames and pages of hundreds of rows, written as
multi-row INSERTs with row states in their binary form) leave the replica a delta-by-delta apply
leaves, on typed values, into a table that already holds rows and pending writes; a checkpoint
broken off between frames and applied again from the start ends in the same replica."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

from lakesync.client._store import LocalStore
from lakesync.delta import RowDelta
from lakesync.hlc import HLC, encode
from lakesync.merge import decode_row_state
from lakesync.schema import parse_schema

SCHEMA = parse_schema(
    {
        "table": "t",
        "columns": [
            {"name": "s", "type": "string"},
            {"name": "n", "type": "number"},
            {"name": "b", "type": "boolean"},
            {"name": "j", "type": "json"},
            {"name": "i", "type": "integer"},
            {"name": "d", "type": "decimal", "precision": 20, "scale": 4},
            {"name": "ts", "type": "timestamp"},
            {"name": "day", "type": "date"},
            {"name": "raw", "type": "bytes"},
        ],
    }
)
BASE = encode(1_700_000_000_000, 0)
ROWS = 333  # more than one multi-row INSERT (100 rows), and a partial one


def _values(i: int) -> dict[str, Any]:
    """Typed wire values of row ``i``, some of them null or of an edge form."""
    return {
        "s": f"row {i} é" if i % 7 else None,
        "n": [1, 2.5, -0.0, 2**53, 1e300][i % 5],
        "b": i % 3 == 0,
        "j": {"k": [i, None, "x"]} if i % 4 else [],
        "i": str(2**62 + i) if i % 2 else i,
        "d": f"{i}.{i % 10000:04}",
        "ts": f"2024-02-{1 + i % 28:02}T10:00:{i % 60:02}.123456Z",
        "day": f"19{10 + i % 90}-07-20",
        "raw": ["", "AA==", "AGH/"][i % 3],
    }


def _deltas() -> list[RowDelta]:
    """Each row's INSERT, then for some an UPDATE by another client, a DELETE, a revival."""
    out = []
    for i in range(ROWS):
        rid = f"r{i:04}"
        out.append(RowDelta.create("INSERT", "t", rid, "w", _values(i), BASE + 10 * i))
        if i % 5 == 0:
            out.append(RowDelta.create("UPDATE", "t", rid, "v", {"s": "later"}, BASE + 10 * i + 1))
        if i % 11 == 0:
            out.append(RowDelta.create("DELETE", "t", rid, "w", {}, BASE + 10 * i + 2))
        if i % 22 == 0:
            out.append(RowDelta.create("UPDATE", "t", rid, "v", {"n": 7}, BASE + 10 * i + 3))
    return out


def _replica(path: Path) -> tuple[LocalStore, HLC]:
    """A replica whose table already holds rows (one of them also in the batch) and a pending
    write of a row the batch sends."""
    s, clock = LocalStore(str(path), [SCHEMA]), HLC()
    held = [
        RowDelta.create("INSERT", "t", "r0003", "old", {"s": "held", "n": 1}, BASE - 5),
        RowDelta.create("INSERT", "t", "zz-kept", "old", {"s": "kept"}, BASE - 4),
    ]
    s.apply_remote(held, "remote", clock)
    s.write("INSERT", "t", "r0008", {"s": "mine", "b": True}, clock, "me")
    return s, clock


def _contents(s: LocalStore) -> tuple[list[dict[str, Any]], list[tuple[str, Any]]]:
    """The visible rows (Python values) and each row's remote state, decoded."""
    rows = s.query("select * from t order by row_id")
    states = [
        (r["row_id"], decode_row_state(r["state"]))
        for r in s.query("select row_id, state from _ls_rows order by row_id")
    ]
    return rows, states


def test_a_batch_leaves_the_replica_its_deltas_applied_one_by_one_leave(tmp_path: Path) -> None:
    deltas = _deltas()
    bulk, clock = _replica(tmp_path / "bulk.db")
    bulk.apply_remote(deltas, "remote", clock)
    single, clock = _replica(tmp_path / "single.db")
    for delta in deltas:
        single.apply_remote([delta], "remote", clock)
    assert _contents(bulk) == _contents(single)
    rows = {r["row_id"]: r for r in bulk.query("select * from t")}
    assert rows["r0008"]["s"] == "mine"  # the pending write still wins over the batch
    assert rows["zz-kept"]["s"] == "kept" and "r0011" not in rows and rows["r0022"]["n"] == 7
    typed = rows["r0001"]
    assert (typed["i"], typed["d"], typed["day"], typed["raw"], typed["j"]) == (
        2**62 + 1, Decimal("1.0001"), dt.date(1911, 7, 20), b"\x00", {"k": [1, None, "x"]}
    )
    assert typed["ts"] == dt.datetime(2024, 2, 2, 10, 0, 1, 123456, tzinfo=dt.UTC)
    assert len(rows) == ROWS - len(range(0, ROWS, 11)) + len(range(0, ROWS, 22)) + 1


def test_a_checkpoint_broken_off_between_frames_applies_again_to_the_same_replica(
    tmp_path: Path,
) -> None:
    deltas = _deltas()
    frames = [deltas[i : i + 150] for i in range(0, len(deltas), 150)]
    position = BASE + 10 * ROWS
    whole, clock = _replica(tmp_path / "whole.db")
    for frame in frames:
        whole.apply_remote(frame, "remote", clock)
    whole.apply_remote([], "remote", clock, ("gw", position))
    # The first two frames commit, then the process dies: the cursor never moved.
    broken, clock = _replica(tmp_path / "broken.db")
    for frame in frames[:2]:
        broken.apply_remote(frame, "remote", clock)
    broken.close()
    again, clock = LocalStore(str(tmp_path / "broken.db"), [SCHEMA]), HLC()
    assert again.cursor("gw") == 0  # so the next sync loads the checkpoint from its start
    for frame in frames:
        again.apply_remote(frame, "remote", clock)
    again.apply_remote([], "remote", clock, ("gw", position))
    assert _contents(again) == _contents(whole)
    assert again.cursor("gw") == position
