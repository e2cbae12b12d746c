"""Chunks become exactly the deltas that bring the gateway's rows to the source's."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from lakesync.connectors._changes import Chunk, changes_for
from lakesync.merge import MergedState

ROW_IDS = st.sampled_from(["a", "b", "c", "d"])
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=3))
ROW = st.dictionaries(st.sampled_from(["x", "y", "z"]), VALUES, max_size=3)


def _state_of(rows: dict[str, dict[str, Any]], clock: itertools.count[int]) -> MergedState:
    state = MergedState()
    for delta in changes_for(Chunk("t", dict(rows)), {}, "seed", lambda: next(clock)):
        state.apply(delta)
    return state


def _visible(state: MergedState) -> dict[str, dict[str, Any]]:
    return {row_id: row for (_, row_id), row in state.live_rows().items()}


@given(
    st.dictionaries(ROW_IDS, ROW),
    st.dictionaries(ROW_IDS, ROW),
    st.lists(ROW_IDS, max_size=4),
)
def test_applying_the_changes_gives_the_source_rows_and_a_second_pass_changes_nothing(
    before: dict[str, dict[str, Any]],
    upserts: dict[str, dict[str, Any]],
    deletes: list[str],
) -> None:
    clock = itertools.count(1)
    state = _state_of(before, clock)
    chunk = Chunk("t", upserts, deletes)
    deltas = changes_for(chunk, _visible(state), "conn", lambda: next(clock))
    for d in deltas:
        state.apply(d)
    after = _visible(state)
    for row_id, row in upserts.items():
        assert row == {k: after[row_id].get(k) for k in row}
    for row_id in set(deletes) - set(upserts):
        assert row_id not in after
    assert changes_for(chunk, after, "conn", lambda: next(clock)) == []


def test_an_update_carries_only_changed_columns_and_true_is_not_one() -> None:
    deltas = changes_for(
        Chunk("t", {"r": {"a": 1, "b": True, "c": "same"}}),
        {"r": {"a": True, "b": True, "c": "same"}},
        "conn",
        lambda: 7,
    )
    assert [(d.op, d.values()) for d in deltas] == [("UPDATE", {"a": 1})]


def test_deletes_of_absent_rows_are_skipped() -> None:
    deltas = changes_for(Chunk("t", deletes=["gone", "live"]), {"live": {"a": 1}}, "c", lambda: 1)
    assert [(d.op, d.row_id) for d in deltas] == [("DELETE", "live")]
