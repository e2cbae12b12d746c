"""Merge (docs/protocol.md §4): column-level LWW with tombstones, checked against a brute-force
oracle."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync.canonical import canonical_json
from lakesync.delta import Op, RowDelta
from lakesync.merge import (
    Cell,
    MergedState,
    RowChange,
    RowState,
    apply_delta,
    decode_row_state,
    encode_row_state,
    encode_row_state_binary,
    merge_state,
)
from lakesync.values import MAX_SAFE_MAGNITUDE, normalize_value

Key = tuple[str, str]
CLIENTS = ["alice", "bob", "carol"]
COLUMNS = ["x", "y", "z"]


def mk(op: Op, hlc: int, client: str, row: str = "r1", table: str = "t", **cols: Any) -> RowDelta:
    return RowDelta.create(op, table, row, client, cols, hlc)


def canon(state: dict[Key, dict[str, Any]] | dict[str, Any] | None) -> str:
    """A type-exact comparison form (Python's == says True == 1 == 1.0; JSON does not)."""
    if state is None or not all(isinstance(k, tuple) for k in state):
        return canonical_json(state)
    return canonical_json(sorted([list(k), v] for k, v in state.items()))


def oracle(deltas: list[RowDelta]) -> dict[Key, dict[str, Any]]:
    """docs/protocol.md §4 read literally: for each row, the latest DELETE clock is the tombstone;
    the row exists iff some write's (hlc, clientId) is strictly greater; each column shows the value
    of the greatest write after the tombstone that names it. Brute force, no incremental state."""
    out: dict[Key, dict[str, Any]] = {}
    keys = {(d.table, d.row_id) for d in deltas}
    for key in keys:
        mine = [d for d in deltas if (d.table, d.row_id) == key]
        deletes = [(d.hlc, d.client_id) for d in mine if d.op == "DELETE"]
        tomb = max(deletes) if deletes else None
        after = [
            d for d in mine if d.op != "DELETE" and (tomb is None or (d.hlc, d.client_id) > tomb)
        ]
        if not after:
            continue
        row: dict[str, Any] = {}
        for col in {c.column for d in after for c in d.columns}:
            writers = [d for d in after if col in d.values()]
            best = max(writers, key=lambda d: (d.hlc, d.client_id))
            row[col] = best.values()[col]
        out[key] = row
    return out


_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from(["a", "b", "é", ""]),
    st.just(1.5),
    st.just({"n": [1, 2]}),
)
_event = st.tuples(
    st.sampled_from(["INSERT", "UPDATE", "DELETE"]),
    st.integers(1, 8),  # a narrow HLC range makes equal-HLC ties between clients common
    st.sampled_from(CLIENTS),
    st.sampled_from([("t", "r1"), ("t", "r2"), ("u", "r1")]),
    st.dictionaries(st.sampled_from(COLUMNS), _values, max_size=3),
)


@st.composite
def histories(draw: st.DrawFn) -> list[RowDelta]:
    """Deltas from >= 3 clients with ties, DELETEs and revivals.

    A client never writes two different deltas to the same row at the same HLC (that would be
    a misbehaving client; the protocol leaves it undefined), but a DELETE may share a write's clock.
    """
    events = draw(st.lists(_event, min_size=1, max_size=25))
    seen: set[tuple[str, str, int, str]] = set()
    out: list[RowDelta] = []
    for op, hlc, client, (table, row), cols in events:
        if op != "DELETE":
            ident = (table, row, hlc, client)
            if ident in seen:
                continue
            seen.add(ident)
        out.append(mk(op, hlc, client, row, table, **({} if op == "DELETE" else cols)))
    return out


@settings(max_examples=300)
@given(histories())
def test_merge_state_matches_brute_force_oracle(history: list[RowDelta]) -> None:
    assert canon(merge_state(history)) == canon(oracle(history))


@settings(max_examples=200)
@given(st.data(), histories())
def test_merge_state_independent_of_order_and_duplicates(
    data: st.DataObject, history: list[RowDelta]
) -> None:
    expected = canon(merge_state(history))
    shuffled = data.draw(st.permutations(history))
    assert canon(merge_state(shuffled)) == expected
    dups = data.draw(st.lists(st.sampled_from(history), max_size=10))
    redelivered = data.draw(st.permutations(history + dups))
    assert canon(merge_state(redelivered)) == expected


@settings(max_examples=200)
@given(histories())
def test_incremental_apply_agrees_with_merge_state_on_every_prefix(
    history: list[RowDelta],
) -> None:
    state = MergedState()
    for i, delta in enumerate(history):
        key = (delta.table, delta.row_id)
        before = merge_state(history[:i]).get(key)
        change = state.apply(delta)
        after_all = merge_state(history[: i + 1])
        assert canon(state.live_rows()) == canon(after_all)
        assert canon(change.before) == canon(before)
        assert canon(change.after) == canon(after_all.get(key))
        assert change.created == (before is None and key in after_all)
        assert change.deleted == (before is not None and key not in after_all)
        assert change.changed == (canon(before) != canon(after_all.get(key)))


@settings(max_examples=100)
@given(histories(), histories())
def test_row_state_round_trips_through_json_and_keeps_merging(
    first: list[RowDelta], rest: list[RowDelta]
) -> None:
    state = MergedState()
    for d in first:
        state.apply(d)
    restored = MergedState()
    for key, row in state.rows.items():
        restored.rows[key] = decode_row_state(encode_row_state(row))
        assert restored.rows[key] == row
    for d in rest:
        assert restored.apply(d) == state.apply(d)
    assert canon(restored.live_rows()) == canon(merge_state(first + rest))


def test_late_delta_keeps_exactly_the_columns_it_wins() -> None:
    newer = mk("UPDATE", 20, "alice", x="new-x")
    late = mk("UPDATE", 10, "bob", x="old-x", y="late-y")
    assert merge_state([newer, late]) == {("t", "r1"): {"x": "new-x", "y": "late-y"}}
    assert merge_state([late, newer]) == {("t", "r1"): {"x": "new-x", "y": "late-y"}}
    state = MergedState()
    state.apply(newer)
    change = state.apply(late)
    assert change.changed_columns == {"y"}
    assert not change.created
    assert state.rows[("t", "r1")].cells["x"] == Cell("new-x", 20, "alice")


def test_equal_hlc_tie_goes_to_greater_client_id() -> None:
    a = mk("UPDATE", 5, "alice", x=1)
    b = mk("UPDATE", 5, "bob", x=2)
    assert merge_state([a, b]) == merge_state([b, a]) == {("t", "r1"): {"x": 2}}


def test_revived_row_holds_only_cells_newer_than_the_tombstone() -> None:
    deltas = [
        mk("INSERT", 1, "alice", x=1, y=2, z=3),
        mk("DELETE", 2, "bob"),
        mk("UPDATE", 3, "carol", y=20),
    ]
    for order in (deltas, deltas[::-1], [deltas[2], deltas[0], deltas[1]]):
        assert merge_state(order) == {("t", "r1"): {"y": 20}}


def test_delete_after_all_writes_removes_row_and_older_write_does_not_revive() -> None:
    deltas = [mk("INSERT", 1, "alice", x=1), mk("DELETE", 5, "bob"), mk("UPDATE", 4, "carol", x=9)]
    assert merge_state(deltas) == {}
    state = MergedState()
    changes = [state.apply(d) for d in deltas]
    assert changes[0].created
    assert changes[1].deleted
    assert not changes[2].changed
    assert state.rows[("t", "r1")].visible() is None


def test_delete_wins_an_exact_clock_tie() -> None:
    insert, delete = mk("INSERT", 7, "alice", x=1), mk("DELETE", 7, "alice")
    assert merge_state([insert, delete]) == merge_state([delete, insert]) == {}
    # Different clients at the same HLC: the client id decides, in either direction.
    assert merge_state([mk("INSERT", 7, "alice", x=1), mk("DELETE", 7, "bob")]) == {}
    assert merge_state([mk("INSERT", 7, "bob", x=1), mk("DELETE", 7, "alice")]) == {
        ("t", "r1"): {"x": 1}
    }


def test_delete_before_insert_arrives_out_of_order() -> None:
    row = RowState()
    change = apply_delta(row, mk("DELETE", 9, "bob"))
    assert change == RowChange(None, None)
    assert not change.changed
    assert not row.live
    change = apply_delta(row, mk("INSERT", 3, "alice", x=1))
    assert not change.changed
    assert row.visible() is None


def test_row_change_reports_changed_columns_with_type_sensitive_values() -> None:
    state = MergedState()
    assert state.apply(mk("INSERT", 1, "alice", x=1, y="a")).changed_columns == {"x", "y"}
    change = state.apply(mk("UPDATE", 2, "alice", x=True, y="a"))
    assert change.changed_columns == {"x"}  # True is not 1 in JSON
    assert change.changed
    assert not state.apply(mk("UPDATE", 3, "alice", y="a")).changed
    assert state.apply(mk("DELETE", 4, "alice")).changed_columns == {"x", "y"}


def test_row_state_stored_form_is_exact_json_and_reads_older_decimal_string_hlcs() -> None:
    row = RowState()
    apply_delta(row, mk("INSERT", 2**64 - 1, "alice", x={"deep": [1]}))
    apply_delta(row, mk("DELETE", 5, "bob"))
    d = json.loads(encode_row_state(row))
    assert d == {
        "c": {"x": [{"deep": [1]}, 2**64 - 1, "alice"]},
        "w": [2**64 - 1, "alice"],
        "t": [5, "bob"],
    }
    assert decode_row_state(encode_row_state(row)) == row
    assert decode_row_state(encode_row_state(RowState())) == RowState()
    # States stored before RowState was a Struct carry HLCs as decimal strings.
    older = {
        "c": {"x": [{"deep": [1]}, str(2**64 - 1), "alice"]},
        "w": [str(2**64 - 1), "alice"],
        "t": ["5", "bob"],
    }
    assert decode_row_state(json.dumps(older)) == row


# Every value a replica may hold (lakesync.values): JSON values with integers up to 2^53.
_held = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-MAX_SAFE_MAGNITUDE, MAX_SAFE_MAGNITUDE)
    | st.floats(allow_nan=False, allow_infinity=False).map(normalize_value)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
_clock = st.tuples(st.integers(0, 2**64 - 1), st.text(min_size=1))


@given(
    st.dictionaries(st.text(), st.builds(Cell, _held, st.integers(0, 2**64 - 1), st.text())),
    st.none() | _clock,
    st.none() | _clock,
)
def test_row_state_binary_form_reads_back_exactly(
    cells: dict[str, Cell], write: tuple[int, str] | None, tomb: tuple[int, str] | None
) -> None:
    row = RowState(cells, write, tomb)
    binary = encode_row_state_binary(row)
    assert decode_row_state(binary) == row
    assert decode_row_state(memoryview(binary)) == row
    assert decode_row_state(encode_row_state(row)) == row  # the same decoder reads the JSON


def test_row_state_binary_form_falls_back_to_json_beyond_64_bit_integers() -> None:
    row = RowState({"x": Cell(2**70, 1, "a")}, (1, "a"))
    assert encode_row_state_binary(row) == encode_row_state(row)
    assert decode_row_state(encode_row_state_binary(row)) == row
