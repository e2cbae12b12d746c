"""The pure read access logic: snapshots rebuild a replica's row with its real clocks, and
a reader hears only of rows it sees or may hold."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync.delta import VIEW_ENTRY_CLIENT, VIEW_EVICTION_CLIENT, RowDelta, is_view_eviction
from lakesync.merge import MergedState, RowState, apply_delta
from lakesync.rules import parse_rules
from lakesync.views import (
    BroadcastView,
    Reader,
    RowRecord,
    SnapshotCache,
    ViewHistory,
    claims_hash,
    effective_rules,
    may_hold,
    page_view,
    resync_view,
    row_snapshot,
    view_key,
    whole_row_snapshot,
)
from lakesync.wire import knows_view_evictions
from tests.api.helpers import WholeRowReplica

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
EVERYONE = parse_rules({"version": 1, "buckets": [{"name": "all", "tables": [], "filters": []}]})


def reader(
    since: int = 0,
    rules: list[tuple[int, object]] | None = None,
    claims: list[tuple[int, dict[str, str]]] | None = None,
    stamp: int = 0,
) -> Reader:
    history = ViewHistory(rules or [(0, RULES)], claims or [(0, ALICE)])  # type: ignore[arg-type]
    return Reader("alice", ALICE, RULES, stamp, since, history)


def d(op: str, row: str, hlc: int, client: str = "c", **cols: object) -> RowDelta:
    return RowDelta.create(op, "todos", row, client, cols, hlc)  # type: ignore[arg-type]


def record(*deltas: RowDelta, ingest: int = 1000) -> RowRecord:
    state = RowState()
    for x in deltas:
        apply_delta(state, x)
    return RowRecord(state, ingest)


def test_snapshot_carries_real_clocks_so_a_newer_pending_write_still_wins() -> None:
    gw = record(
        d("INSERT", "r", 10, owner="alice", title="old", done=False),
        d("UPDATE", "r", 30, client="bob", done=True),
        ingest=31,
    )
    snap = row_snapshot("todos", "r", gw.state, True, 31)
    assert [(x.op, x.client_id, x.hlc) for x in snap] == [
        ("DELETE", VIEW_EVICTION_CLIENT, 31),
        ("INSERT", "bob", 30),  # the greatest write clock first: an INSERT for plain clients
        ("UPDATE", "c", 10),
    ]
    pending = d("UPDATE", "r", 20, client="alice", title="mine")  # offline, before bob's write
    replica = MergedState()
    replica.apply(d("INSERT", "r", 10, owner="alice", title="old", done=False))
    for x in [*snap, pending]:
        replica.apply(x)
    assert replica.live_rows() == {
        ("todos", "r"): {"owner": "alice", "title": "mine", "done": True}
    }
    # The old scheme's synthetic clocks (or any stale state) are forgotten by the eviction.
    stale = MergedState()
    stale.apply(d("INSERT", "r", 10**9, client="lakesync-gateway-1", owner="alice", junk=1))
    for x in snap:
        stale.apply(x)
    assert stale.live_rows() == {("todos", "r"): {"owner": "alice", "title": "old", "done": True}}


def test_snapshot_of_a_revived_row_keeps_its_tombstone_and_only_newer_cells() -> None:
    gw = record(
        d("INSERT", "r", 10, owner="alice", a=1, b=2),
        d("DELETE", "r", 20, client="bob"),
        d("UPDATE", "r", 30, owner="alice"),
        ingest=40,
    )
    snap = row_snapshot("todos", "r", gw.state, True, 40)
    assert [(x.op, x.client_id, x.hlc, x.values()) for x in snap[1:]] == [
        ("DELETE", "bob", 20, {}),
        ("INSERT", "c", 30, {"owner": "alice"}),
    ]
    replica = MergedState()
    late = d("UPDATE", "r", 15, client="alice", a=9)  # pending, older than the tombstone
    for x in [*snap, late]:
        replica.apply(x)
    assert replica.live_rows() == {("todos", "r"): {"owner": "alice"}}
    # A deleted row the client may hold: the eviction and the real tombstone.
    dead = record(d("INSERT", "r", 10, owner="alice"), d("DELETE", "r", 20, client="bob"))
    assert [(x.op, x.client_id) for x in row_snapshot("todos", "r", dead.state, False, 50)] == [
        ("DELETE", VIEW_EVICTION_CLIENT),
        ("DELETE", "bob"),
    ]
    # A live row filtered out: the eviction alone.
    out = row_snapshot("todos", "r", record(d("INSERT", "r", 1, owner="bob")).state, False, 9)
    assert len(out) == 1 and is_view_eviction(out[0])


def test_page_view_raw_passes_the_log_and_rules_give_one_snapshot_per_row() -> None:
    a1, a2 = d("INSERT", "r1", 10, owner="alice"), d("UPDATE", "r1", 11, x=1)
    b1 = d("INSERT", "r2", 12, owner="bob")
    entries = [a1, b1, a2]
    rows = {("todos", "r1"): record(a1, a2, ingest=102), ("todos", "r2"): record(b1, ingest=101)}
    assert page_view(entries, rows, reader(since=99), raw=True) == [a1, b1, a2]
    history = {
        key: (RowState(), [(rec.last_ingest, a1 if key[1] == "r1" else b1)])
        for key, rec in rows.items()
    }
    view = page_view(entries, rows, reader(since=99), False, SnapshotCache(), history)
    # r2 (bob's) was never visible to alice: not even its rowId reaches her.
    assert [(x.op, x.row_id, x.hlc) for x in view] == [
        ("DELETE", "r1", 102),
        ("INSERT", "r1", 11),
        ("UPDATE", "r1", 10),
    ]
    assert view[1].values() == {"x": 1} and view[2].values() == {"owner": "alice"}


def test_a_fresh_reader_gets_exactly_its_view() -> None:
    rows = {
        ("todos", f"b{i}"): record(d("INSERT", f"b{i}", 5, owner="bob"), ingest=10 + i)
        for i in range(50)
    }
    rows[("todos", "gone")] = record(d("INSERT", "gone", 5, owner="alice"), d("DELETE", "gone", 6))
    rows[("todos", "a")] = record(d("INSERT", "a", 5, owner="alice"), ingest=99)
    deltas = resync_view(rows, reader(since=0, stamp=100), SnapshotCache())
    assert {x.row_id for x in deltas} == {"a"}
    # A client that pushed before its first pull may hold the rows it wrote: those are evicted.
    pushed_first = Reader(
        "alice",
        ALICE,
        RULES,
        100,
        0,
        ViewHistory.fixed(RULES, ALICE),
        frozenset({("todos", "b3")}),
    )
    deltas = resync_view(rows, pushed_first, SnapshotCache())
    assert [(x.row_id, is_view_eviction(x)) for x in deltas] == [
        ("b3", True),
        ("a", True),
        ("a", False),
    ]


def test_resync_after_a_rules_change_evicts_only_rows_visible_before() -> None:
    # Rules were EVERYONE until stamp 50, then RULES; alice's cursor is 40.
    before = reader(since=40, rules=[(5, EVERYONE), (50, RULES)], stamp=50)
    bob_old = record(d("INSERT", "b1", 5, owner="bob"), ingest=10)
    key = ("todos", "b1")
    assert may_hold(key, before, bob_old.state, {})
    # The same row created after the change was never visible to her.
    bob_new = record(d("INSERT", "b2", 60, owner="bob"), ingest=61)
    new_hist = {("todos", "b2"): (RowState(), [(61, d("INSERT", "b2", 60, owner="bob"))])}
    assert not may_hold(("todos", "b2"), before, bob_new.state, new_hist)
    # Without the rules history (RULES all along) the old row was never hers either.
    assert not may_hold(key, reader(since=40, stamp=50), bob_old.state, {})
    deltas = resync_view(
        {key: bob_old, ("todos", "b2"): bob_new}, before, SnapshotCache(), new_hist
    )
    assert [(x.row_id, is_view_eviction(x)) for x in deltas] == [("b1", True)]


def test_may_hold_follows_claims_versions() -> None:
    team = parse_rules(
        {
            "version": 1,
            "buckets": [
                {
                    "name": "t",
                    "tables": [],
                    "filters": [{"column": "team", "op": "in", "value": "jwt:teams"}],
                }
            ],
        }
    )
    row = record(d("INSERT", "r", 5, team="red"), ingest=10).state
    moved = Reader(
        "alice",
        {"sub": "alice", "teams": ["blue"]},
        team,
        70,
        40,
        ViewHistory(
            [(1, team)],
            [(0, {"sub": "alice", "teams": ["red"]}), (70, {"sub": "alice", "teams": ["blue"]})],
        ),
    )
    assert may_hold(("todos", "r"), moved, row, {})
    never = Reader(
        "alice",
        {"sub": "alice", "teams": ["blue"]},
        team,
        70,
        40,
        ViewHistory(
            [(1, team)],
            [(0, {"sub": "alice", "teams": ["green"]}), (70, {"sub": "alice", "teams": ["blue"]})],
        ),
    )
    assert not may_hold(("todos", "r"), never, row, {})


def test_may_hold_replays_the_history_after_the_cursor() -> None:
    key = ("todos", "r")
    theirs = record(d("INSERT", "r", 1, owner="bob")).state
    mine = record(d("INSERT", "r", 1, owner="alice")).state
    now = RowState()
    r = reader(since=1)
    assert not may_hold(key, r, theirs, {})  # unchanged since the cursor, never hers
    assert may_hold(key, r, mine, {})
    assert not may_hold(key, r, now, {key: (theirs, [(2, d("UPDATE", "r", 2, x=1))])})
    assert may_hold(key, r, now, {key: (mine, [(2, d("UPDATE", "r", 2, owner="bob"))])})
    passing = [(2, d("UPDATE", "r", 2, owner="alice")), (3, d("UPDATE", "r", 3, owner="bob"))]
    assert may_hold(key, r, now, {key: (theirs, passing)})
    assert theirs.visible() == {"owner": "bob"}  # the start state is not mutated
    own_write = d("INSERT", "r", 2, client="alice", title="no owner")
    assert may_hold(key, r, now, {key: (RowState(), [(2, own_write)])})


def test_snapshot_cache_is_bounded_and_reuses_results() -> None:
    cache = SnapshotCache(size=2)
    rec = record(d("INSERT", "r", 1, x=1), ingest=5)
    first = cache.snapshot(("todos", "r"), rec, True, 5)
    assert cache.snapshot(("todos", "r"), rec, True, 5) is first
    cache.snapshot(("todos", "r"), rec, False, 5)
    cache.snapshot(("todos", "r"), rec, True, 6)
    assert cache.snapshot(("todos", "r"), rec, True, 5) is not first
    whole = cache.snapshot(("todos", "r"), rec, True, 5, whole_rows=True)
    assert [x.client_id for x in whole] == [VIEW_EVICTION_CLIENT, VIEW_ENTRY_CLIENT]


def test_a_reader_without_view_evictions_gets_whole_rows() -> None:
    rec = record(d("INSERT", "r", 1, owner="alice", x=1), d("UPDATE", "r", 2, client="z", y=2))
    rows = {("todos", "r"): rec}
    plain = Reader("alice", ALICE, RULES, 0, 0, ViewHistory.fixed(RULES, ALICE), whole_rows=True)
    assert resync_view(rows, plain) == whole_row_snapshot(
        "todos", "r", {"owner": "alice", "x": 1, "y": 2}, 1000
    )


@given(
    st.lists(
        st.tuples(
            st.none() | st.dictionaries(st.sampled_from("abc"), st.integers(0, 3), max_size=3),
            st.integers(1, 2**20),
            st.integers(0, 2**20),
        ),
        max_size=8,
    )
)
def test_whole_row_snapshots_set_a_whole_row_replica_to_the_row(
    changes: list[tuple[dict[str, int] | None, int, int]],
) -> None:
    """Whatever a whole-row last-writer-wins replica applied before (its own writes, which are
    older than the row's next ingest stamp, or earlier snapshots), each snapshot at a greater
    base leaves it holding exactly the row's visible state (None: not in its view)."""
    replica, base = WholeRowReplica(), 0
    for values, step, local in changes:
        replica.write(d("UPDATE", "r", base + local % step, client="me", x=local))
        base += step
        for x in whole_row_snapshot("todos", "r", values, base):
            replica.write(x)
        want = {} if values is None else {("todos", "r"): values}
        assert replica.rows() == want


@pytest.mark.parametrize(
    ("header", "knows"),
    [
        (None, False),
        ("", False),
        ("view-evictions", True),
        ("gzip, View-Evictions ", True),
        ("view-evictions-v2", False),
    ],
)
def test_a_client_says_it_knows_view_evictions_in_a_header(header: str | None, knows: bool) -> None:
    assert knows_view_evictions(header) is knows


def test_admin_sees_everything_and_claims_hash_tracks_claims() -> None:
    assert effective_rules(RULES, {"sub": "x", "role": "admin"}) is None
    assert effective_rules(RULES, ALICE) is RULES
    assert claims_hash(ALICE) == claims_hash(dict(reversed(list(ALICE.items()))))
    assert claims_hash(ALICE) != claims_hash(ALICE | {"team": "red"})


TEAM_RULES = parse_rules(
    {
        "version": 1,
        "buckets": [
            {"name": "mine", "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}]},
            {"name": "team", "filters": [{"column": "team", "op": "in", "value": "jwt:teams"}]},
        ],
    }
)
CLIENTS = ["alice", "bob", "carol"]
_claims = st.fixed_dictionaries(
    {"sub": st.sampled_from(CLIENTS), "role": st.sampled_from(["client", "client", "admin"])},
    optional={"teams": st.sampled_from(["red", ["red"], ["red", "blue"], "blue"])},
)
_write = st.tuples(
    st.sampled_from(["INSERT", "UPDATE", "DELETE"]),
    st.sampled_from(["r1", "r2", "r3"]),
    st.sampled_from(CLIENTS),
    st.sampled_from(CLIENTS),
    st.sampled_from([None, "red", "blue"]),
)


def _deltas(writes: list[tuple[str, str, str, str, str | None]], start: int) -> list[RowDelta]:
    out = []
    for i, (op, row, client, owner, team) in enumerate(writes):
        cols = {} if op == "DELETE" else {"owner": owner, "team": team, "n": i}
        out.append(d(op, row, start + i, client=client, **cols))
    return out


@given(
    st.lists(_write, max_size=6),
    st.lists(_write, min_size=1, max_size=4),
    st.lists(st.tuples(_claims, st.booleans()), min_size=1, max_size=6),
)
def test_a_broadcast_view_is_the_page_view_and_equal_view_keys_see_alike(
    before: list[tuple[str, str, str, str, str | None]],
    batch: list[tuple[str, str, str, str, str | None]],
    receivers: list[tuple[dict[str, object], bool]],
) -> None:
    """What :class:`BroadcastView` gives each receiver of a stored batch is what
    :func:`page_view` gives it (the hub's per-view fan-out changes no client's deltas), and
    receivers with equal :func:`view_key` that wrote none of the batch get the same deltas
    (so the hub computes and encodes them once)."""
    old = _deltas(before, 1000)
    new = _deltas(batch, 2000)
    end = 5000  # the batch's ingest stamp (a batch is atomic)
    states: dict[tuple[str, str], RowState] = {}
    for x in old:
        apply_delta(states.setdefault(("todos", x.row_id), RowState()), x)
    history = {
        ("todos", x.row_id): (
            RowState(dict(s.cells), s.write, s.tombstone)
            if (s := states.get(("todos", x.row_id)))
            else RowState(),
            [(end, y) for y in new if y.row_id == x.row_id],
        )
        for x in new
    }
    for x in new:
        apply_delta(states.setdefault(("todos", x.row_id), RowState()), x)
    rows = {k: RowRecord(s, end) for k, s in states.items()}
    since = end - 1
    shared = BroadcastView(new, rows, since, SnapshotCache(), history)
    seen: dict[object, list[RowDelta]] = {}
    for claims, whole in receivers:
        sub = str(claims["sub"])
        r = Reader(
            sub,
            claims,
            effective_rules(TEAM_RULES, claims),
            since,
            since,
            ViewHistory.fixed(TEAM_RULES, claims),
            whole_rows=whole,
        )
        got = shared.view(r)
        assert got == page_view(new, rows, r, False, None, history)
        if sub not in shared.writers:
            key = (whole, view_key(TEAM_RULES, claims))
            assert seen.setdefault(key, got) == got
