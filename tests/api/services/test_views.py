"""The pure read/write access logic: snapshots replace a replica's row exactly."""

from __future__ import annotations

import pytest

from api.services.views import (
    SNAPSHOT_DELETE_CLIENT,
    SnapshotCache,
    check_write,
    claims_hash,
    effective_rules,
    page_view,
    row_snapshot,
)
from api.store.base import LogEntry, RowRecord
from lakesync.delta import RowDelta
from lakesync.errors import ForbiddenError
from lakesync.merge import MergedState, RowState, apply_delta
from lakesync.rules import parse_rules

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
ALICE = {"sub": "alice", "role": "client"}


def d(op: str, row: str, hlc: int, client: str = "c", **cols: object) -> RowDelta:
    return RowDelta.create(op, "todos", row, client, cols, hlc)  # type: ignore[arg-type]


def record(*deltas: RowDelta, ingest: int = 1000) -> RowRecord:
    state = RowState()
    for x in deltas:
        apply_delta(state, x)
    return RowRecord(state, ingest)


def test_snapshot_overrides_whatever_the_replica_held() -> None:
    replica = MergedState()
    for x in (d("INSERT", "r", 10, owner="alice", a=1, b=2), d("UPDATE", "r", 20, client="z", b=3)):
        replica.apply(x)
    rec = record(d("INSERT", "r", 10, owner="alice", a=1), d("UPDATE", "r", 30, a=5), ingest=31)
    for x in row_snapshot("todos", "r", rec.state, True, rec.last_ingest):
        replica.apply(x)
    assert replica.live_rows() == {("todos", "r"): {"owner": "alice", "a": 5}}
    # A later eviction removes it; a later snapshot brings it back exactly.
    for x in row_snapshot("todos", "r", rec.state, False, 40):
        replica.apply(x)
    assert replica.live_rows() == {}
    for x in row_snapshot("todos", "r", rec.state, True, 50):
        replica.apply(x)
    assert replica.live_rows() == {("todos", "r"): {"owner": "alice", "a": 5}}


def test_page_view_raw_passes_the_log_and_rules_give_one_snapshot_per_row() -> None:
    a1, a2 = d("INSERT", "r1", 10, owner="alice"), d("UPDATE", "r1", 11, x=1)
    b1 = d("INSERT", "r2", 12, owner="bob")
    entries = [LogEntry(100, "gw", a1), LogEntry(101, "gw", b1), LogEntry(102, "gw", a2)]
    rows = {("todos", "r1"): record(a1, a2, ingest=102), ("todos", "r2"): record(b1, ingest=101)}
    assert page_view(entries, rows, None, ALICE, 0, raw=True) == [a1, b1, a2]
    view = page_view(entries, rows, RULES, ALICE, 0, raw=False, cache=SnapshotCache())
    assert [(x.op, x.row_id, x.hlc) for x in view] == [
        ("DELETE", "r2", 101),
        ("DELETE", "r1", 102),
        ("INSERT", "r1", 102),
    ]
    assert view[0].client_id == SNAPSHOT_DELETE_CLIENT
    assert view[2].values() == {"owner": "alice", "x": 1}


def test_snapshot_cache_is_bounded_and_reuses_results() -> None:
    cache = SnapshotCache(size=2)
    rec = record(d("INSERT", "r", 1, x=1), ingest=5)
    first = cache.snapshot(("todos", "r"), rec, True, 5)
    assert cache.snapshot(("todos", "r"), rec, True, 5) is first
    cache.snapshot(("todos", "r"), rec, False, 5)
    cache.snapshot(("todos", "r"), rec, True, 6)
    assert cache.snapshot(("todos", "r"), rec, True, 5) is not first


def test_write_access() -> None:
    mine, theirs = (
        record(d("INSERT", "r1", 1, owner="alice")),
        record(d("INSERT", "r2", 1, owner="bob")),
    )
    gone = record(d("INSERT", "r3", 1, owner="bob"), d("DELETE", "r3", 2))
    rows = {("todos", "r1"): mine, ("todos", "r2"): theirs, ("todos", "r3"): gone}
    check_write(
        [
            d("UPDATE", "r1", 5, owner="bob"),
            d("INSERT", "new", 5, owner="x"),
            d("INSERT", "r3", 5, owner="alice"),
        ],
        rows,
        RULES,
        ALICE,
    )
    with pytest.raises(ForbiddenError, match="not visible"):
        check_write([d("UPDATE", "r2", 5, x=1)], rows, RULES, ALICE)
    with pytest.raises(ForbiddenError, match="write access"):
        check_write([RowDelta.create("INSERT", "notes", "n", "c", {"x": 1}, 1)], {}, RULES, ALICE)
    check_write([d("UPDATE", "r2", 5, x=1)], rows, None, ALICE)


def test_admin_sees_everything_and_claims_hash_tracks_claims() -> None:
    assert effective_rules(RULES, {"sub": "x", "role": "admin"}) is None
    assert effective_rules(RULES, ALICE) is RULES
    assert claims_hash(ALICE) == claims_hash(dict(reversed(list(ALICE.items()))))
    assert claims_hash(ALICE) != claims_hash(ALICE | {"team": "red"})


def test_may_hold_replays_the_history_after_the_cursor() -> None:
    from api.services.views import may_hold

    key = ("todos", "r")
    theirs = record(d("INSERT", "r", 1, owner="bob")).state
    mine = record(d("INSERT", "r", 1, owner="alice")).state
    assert may_hold(key, RULES, ALICE, None)  # unknown history: assume it may
    assert may_hold(key, RULES, ALICE, {})
    assert not may_hold(key, RULES, ALICE, {key: (theirs, [d("UPDATE", "r", 2, x=1)])})
    assert may_hold(key, RULES, ALICE, {key: (mine, [d("UPDATE", "r", 2, owner="bob")])})
    passing = [d("UPDATE", "r", 2, owner="alice"), d("UPDATE", "r", 3, owner="bob")]
    assert may_hold(key, RULES, ALICE, {key: (theirs, passing)})
    assert theirs.visible() == {"owner": "bob"}  # the start state is not mutated
    own_write = d("INSERT", "r", 2, client="alice", title="no owner")
    assert may_hold(key, RULES, ALICE, {key: (RowState(), [own_write])})
