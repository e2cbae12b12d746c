"""The view history's behaviour suite (part of PullLog): each client's claims versions, stamped
when they change, next to the gateway's rules versions; run on every store (the ``store``
fixture: SQLite and PostgreSQL)."""

from __future__ import annotations

from lakesync.hotlog.base import HotLog
from lakesync.rules import parse_rules


def test_view_stamps_change_with_the_claims(store: HotLog) -> None:
    assert store.view_stamp("gw1", "alice", "h1", {"sub": "alice", "team": "a"}) == 0
    assert store.view_stamp("gw1", "alice", "h1", {"sub": "alice", "team": "a"}) == 0
    changed = store.view_stamp("gw1", "alice", "h2", {"sub": "alice", "team": "b"})
    assert changed > 0
    assert store.view_stamp("gw1", "alice", "h2", {"sub": "alice", "team": "b"}) == changed


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
