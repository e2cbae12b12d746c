"""Checkpoints: chunks round-trip within their byte budget, and a replica seeded from a checkpoint
then given the later deltas equals one given every delta (filtered by the reader's rules)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync.checkpoint_chunks import chunk_rows, serve_chunk
from lakesync.delta import RowDelta, is_view_eviction
from lakesync.merge import RowState, apply_delta, merge_state
from lakesync.rules import parse_rules, visible
from lakesync.views import Reader, RowKey, RowRecord, ViewHistory, resync_view
from lakesync.wsframes import decode_response

RULES = parse_rules(
    {
        "version": 1,
        "buckets": [
            {
                "name": "mine",
                "tables": ["t"],
                "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
            }
        ],
    }
)
ALICE: dict[str, Any] = {"sub": "alice"}


@st.composite
def histories(draw: st.DrawFn) -> list[RowDelta]:
    """Deltas over few rows, clients, columns and clocks, so ties, revivals and tombstones that
    later writes lose to are common."""
    out = []
    for _ in range(draw(st.integers(0, 30))):
        op = draw(st.sampled_from(["INSERT", "UPDATE", "DELETE"]))
        cols: dict[str, Any] = {}
        if op != "DELETE":
            cols = draw(
                st.dictionaries(
                    st.sampled_from(["a", "b", "owner"]),
                    st.one_of(st.integers(0, 3), st.sampled_from(["alice", "bob"])),
                    max_size=3,
                )
            )
        client = draw(st.sampled_from(["alice", "bob", "carol"]))
        row = draw(st.sampled_from(["r0", "r1", "r2", "r3"]))
        out.append(RowDelta.create(op, "t", row, client, cols, draw(st.integers(1, 12))))  # type: ignore[arg-type]
    return out


def _rows(deltas: list[RowDelta]) -> dict[RowKey, RowRecord]:
    """The gateway's rows after ``deltas`` (ingest HLC = 1000 + position)."""
    rows: dict[RowKey, RowRecord] = {}
    for i, d in enumerate(deltas):
        key = (d.table, d.row_id)
        state = rows[key].state if key in rows else RowState()
        apply_delta(state, d)
        rows[key] = RowRecord(state, 1000 + i)
    return rows


def _served(
    rows: dict[RowKey, RowRecord], reader: Reader, raw: bool, budget: int
) -> list[RowDelta]:
    """What the client decodes from the frames of a checkpoint stored in ``budget`` chunks (the
    reader's written rows looked up per chunk, as the gateway does)."""
    out: list[RowDelta] = []
    looked_up: list[list[RowKey]] = []

    def written_among(keys: list[RowKey]) -> set[RowKey]:
        looked_up.append(keys)
        return {k for k in keys if k in reader.written}

    for body, _ in chunk_rows(sorted(rows.items()), budget):
        looked_up.clear()
        frame = serve_chunk(body, replace(reader, written=frozenset()), raw, 7, written_among)
        assert len(looked_up) <= 1  # one look-up per chunk, of rows the reader cannot see
        if frame is None:
            continue
        assert int.from_bytes(frame[:4], "big") == len(frame) - 4
        deltas, position, more = decode_response(frame[4:])
        assert position == 7 and not more and deltas
        out.extend(deltas)
    return out


def _states(
    deltas: list[RowDelta], held: dict[RowKey, RowState] | None = None
) -> dict[RowKey, RowState]:
    """A client replica's row states after ``deltas`` (over ``held``): it forgets a row on a view
    eviction and merges every other delta (as the Python client does)."""
    states = dict(held or {})
    for d in deltas:
        key = (d.table, d.row_id)
        if is_view_eviction(d):
            states.pop(key, None)
            continue
        apply_delta(states.setdefault(key, RowState()), d)
    return states


def _replica(deltas: list[RowDelta]) -> dict[RowKey, dict[str, Any]]:
    """The visible rows of a client replica given ``deltas`` (see :func:`_states`)."""
    return {k: v for k, s in _states(deltas).items() if (v := s.visible()) is not None}


def _fresh(rules: Any = None) -> Reader:
    return Reader("alice", ALICE, rules, 0, 0, ViewHistory.fixed(rules, ALICE))


@settings(max_examples=300)
@given(histories(), st.data())
def test_checkpoint_then_later_deltas_equals_every_delta(
    deltas: list[RowDelta], data: st.DataObject
) -> None:
    k = data.draw(st.integers(0, len(deltas)))
    # The models may hold a few deltas past the position: the pull delivers them again.
    extra = data.draw(
        st.lists(st.sampled_from(deltas[k:]), unique_by=lambda d: d.delta_id)
        if deltas[k:]
        else st.just([])
    )
    budget = data.draw(st.integers(1, 400))
    seeded = _served(_rows(deltas[:k] + extra), _fresh(), True, budget)
    assert not any(is_view_eviction(d) for d in seeded)
    assert _replica(seeded + deltas[k:]) == merge_state(deltas)


@settings(max_examples=300)
@given(histories(), st.integers(1, 400))
def test_under_rules_a_checkpoint_is_exactly_the_readers_view(
    deltas: list[RowDelta], budget: int
) -> None:
    rows = _rows(deltas)
    served = _served(rows, _fresh(RULES), False, budget)
    expected = {k: v for k, v in merge_state(deltas).items() if visible(RULES, ALICE, k[0], v)}
    assert _replica(served) == expected
    assert {(d.table, d.row_id) for d in served} == set(expected)  # nothing outside the view


def test_rows_the_reader_wrote_and_cannot_see_are_evicted() -> None:
    given_away = [
        RowDelta.create("INSERT", "t", "r", "alice", {"owner": "alice"}, 1),
        RowDelta.create("UPDATE", "t", "r", "alice", {"owner": "bob"}, 2),
        RowDelta.create("INSERT", "t", "s", "bob", {"owner": "bob"}, 3),
    ]
    reader = replace(_fresh(RULES), written=frozenset({("t", "r")}))
    served = _served(_rows(given_away), reader, False, 1000)
    assert [(is_view_eviction(d), d.row_id) for d in served] == [(True, "r")]


@settings(max_examples=200)
@given(histories(), st.integers(1, 400), st.sets(st.sampled_from(["r0", "r1", "r2", "r3"])))
def test_serving_sends_exactly_the_views_snapshots(
    deltas: list[RowDelta], budget: int, written: set[str]
) -> None:
    rows = _rows(deltas)
    reader = replace(_fresh(RULES), stamp=1010, written=frozenset(("t", r) for r in written))
    # A fresh reader's snapshots, less the evictions of the rows it sees (nothing to evict).
    seen = {k for k, rec in rows.items() if visible(RULES, ALICE, k[0], rec.state.visible())}
    expected = [
        d
        for d in resync_view(dict(sorted(rows.items())), reader)
        if not (is_view_eviction(d) and (d.table, d.row_id) in seen)
    ]
    assert _served(rows, reader, False, budget) == expected
    whole = replace(reader, whole_rows=True)
    assert _served(rows, whole, False, budget) == resync_view(dict(sorted(rows.items())), whole)


def test_rows_the_reader_sees_come_without_an_eviction() -> None:
    deltas = [
        RowDelta.create("INSERT", "t", "a", "alice", {"owner": "alice", "n": 1}, 1),
        RowDelta.create("INSERT", "t", "b", "bob", {"owner": "bob"}, 2),
        RowDelta.create("UPDATE", "t", "b", "alice", {"owner": "alice"}, 3),
        RowDelta.create("UPDATE", "t", "g", "alice", {"owner": "bob"}, 4),
    ]
    reader = replace(_fresh(RULES), written=frozenset({("t", "a"), ("t", "g")}))
    served = _served(_rows(deltas), reader, False, 1000)
    # One delta per row seen (each written at one clock); the row given away is evicted.
    assert [(d.row_id, is_view_eviction(d)) for d in served] == [
        ("a", False),
        ("b", False),
        ("g", True),
    ]


@settings(max_examples=300)
@given(histories(), st.data())
def test_a_resync_from_a_checkpoint_over_an_older_view_gives_the_view(
    deltas: list[RowDelta], data: st.DataObject
) -> None:
    """A replica that held an older view (a checkpoint of a prefix of the history, then maybe
    rows it wrote) and applies a newer checkpoint, forgetting the rows it does not send (as a
    resync does), holds exactly the reader's view: the missing evictions change nothing."""
    k = data.draw(st.integers(0, len(deltas)))
    written = frozenset(("t", r) for r in data.draw(st.sets(st.sampled_from(["r0", "r1"]))))
    reader = replace(_fresh(RULES), written=written)
    budget = data.draw(st.integers(1, 400))
    held = _states(_served(_rows(deltas[:k]), reader, False, budget))
    newer = _served(_rows(deltas), reader, False, budget)
    states = _states(newer, held)
    sent = {(d.table, d.row_id) for d in newer}
    replica = {
        key: v for key, s in states.items() if key in sent and (v := s.visible()) is not None
    }
    expected = {k: v for k, v in merge_state(deltas).items() if visible(RULES, ALICE, k[0], v)}
    assert replica == expected


def test_chunks_keep_every_row_in_order_within_their_budget() -> None:
    rows = _rows(
        [
            RowDelta.create("INSERT", "t", f"r{i:03}", "c", {"a": "x" * 50}, i + 1)
            for i in range(200)
        ]
    )
    chunks = list(chunk_rows(sorted(rows.items()), 2000))
    assert len(chunks) > 5 and sum(n for _, n in chunks) == 200
    one_row = max(len(body) for body, n in chunks) // max(n for _, n in chunks)
    assert all(len(body) < 2000 + 2 * one_row for body, _ in chunks)
    served = _served(rows, _fresh(), True, 2000)
    assert [d.row_id for d in served] == sorted(r for _, r in rows)
