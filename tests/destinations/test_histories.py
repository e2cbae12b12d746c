"""Random histories (shuffled, duplicated, late, deletes, revivals) shipped in several change sets
into PostgreSQL and MariaDB give exactly ``merge_state``'s live rows, typed (in PostgreSQL with
U+0000 as U+FFFD: ``storable_value``); ``props`` untouched; a second application changes nothing.
(The change sets here come from the Python merge; the lake computes the same ones with dbt.)"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from lakesync.delta import RowDelta
from lakesync.destinations.base import Destination, normalise_row, typed_change
from lakesync.destinations.factory import KINDS
from lakesync.destinations.statements import storable_value
from lakesync.merge import MergedState, merge_state
from tests.destinations.conftest import _drop, open_fresh

COLUMNS = [("title", "string"), ("score", "number"), ("done", "boolean"), ("meta", "json")]
VALUES: dict[str, hs.SearchStrategy[Any]] = {
    "title": hs.text(max_size=8),  # U+0000 included
    "score": hs.floats(allow_nan=False, allow_infinity=False, width=32),
    "done": hs.booleans(),
    # NUL in keys and values, and the 6-character text \u0000 (JSON writes it \\u0000: no NUL)
    "meta": hs.dictionaries(
        hs.sampled_from(["a", "b", "\x00"]),
        hs.integers(-5, 5)
        | hs.lists(hs.sampled_from(["x", "\x00", "\\u0000"]), max_size=3).map("".join),
        max_size=2,
    ),
}


@hs.composite
def histories(draw: hs.DrawFn) -> list[list[RowDelta]]:
    """Batches of deltas over a few rows and clients; clocks collide, deltas repeat and arrive
    out of order across batches."""
    deltas: list[RowDelta] = []
    for _ in range(draw(hs.integers(1, 25))):
        row = draw(hs.sampled_from(["r1", "r2", "r3", "R1"]))
        client = draw(hs.sampled_from(["c1", "c2"]))
        hlc = draw(hs.integers(1, 40)) << 16
        if draw(hs.integers(0, 4)) == 0:
            deltas.append(RowDelta.create("DELETE", "todos", row, client, {}, hlc))
            continue
        names = draw(hs.lists(hs.sampled_from([n for n, _ in COLUMNS]), min_size=1,
                              max_size=4, unique=True))
        cols = {n: draw(VALUES[n] | hs.none()) for n in names}
        deltas.append(RowDelta.create("UPDATE", "todos", row, client, cols, hlc))
    deltas += draw(hs.lists(hs.sampled_from(deltas), max_size=5))  # duplicates
    shuffled = draw(hs.permutations(deltas))
    cuts = sorted(draw(hs.lists(hs.integers(0, len(shuffled)), max_size=3)))
    bounds = [0, *cuts, len(shuffled)]
    return [shuffled[a:b] for a, b in itertools.pairwise(bounds)]


def ship(dest: Destination, batches: list[list[RowDelta]]) -> None:
    """Each batch: the rows whose visible state changed become one change set."""
    layout = dest.layout("todos", COLUMNS)
    dest.ensure_table(layout)
    state = MergedState()
    for position, batch in enumerate(batches, start=1):
        changes = [state.apply(d) for d in batch]
        touched = {d.row_id for d, c in zip(batch, changes, strict=True) if c.changed}
        change_set = [
            typed_change(layout, row_id, state.rows[("todos", row_id)].visible())
            for row_id in sorted(touched)
        ]
        dest.apply_changes(layout, change_set, position=position)


def expected(dest: Destination, deltas: list[RowDelta]) -> dict[str, dict[str, Any]]:
    """``merge_state``'s live rows as ``dest`` stores them (read back: json canonical)."""
    layout = dest.layout("todos", COLUMNS)
    kind = KINDS.get(dest.spec.kind)  # the tests' own kinds have none
    dialect = None if kind is None else kind.dialect
    kinds = dict(COLUMNS)
    return {
        row_id: normalise_row(layout, {
            name: value if dialect is None else storable_value(kinds[name], value, dialect)
            for name, value in typed_change(layout, row_id, cells).values.items()
        })
        for (_, row_id), cells in merge_state(deltas).items()
    }


def live(dest: Destination) -> dict[str, dict[str, Any]]:
    rows = dest.read_rows(dest.layout("todos", COLUMNS))
    assert all(r["props"] == {} for r in rows)
    return {
        r["row_id"]: {n: r[n] for n, _ in COLUMNS} for r in rows if r.get("deleted_at") is None
    }


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["postgres", "mysql", "lake"])
@pytest.mark.parametrize("delete_mode", ["soft", "hard"])
def test_random_histories_materialise_to_merge_state(kind: str, delete_mode: str) -> None:
    dest, name = open_fresh(kind, delete_mode)  # type: ignore[arg-type]
    try:

        dest.ensure_table(dest.layout("todos", COLUMNS))

        @settings(max_examples=25)
        @given(histories())
        def check(batches: list[list[RowDelta]]) -> None:
            _purge(dest)  # each example starts from an empty table
            ship(dest, batches)
            want = expected(dest, [d for b in batches for d in b])
            assert live(dest) == want
            ship(dest, batches)  # a second run changes nothing
            assert live(dest) == want

        check()
    finally:
        dest.close()
        _drop(kind, name)


def _purge(dest: Destination) -> None:
    """Remove every row (soft-deleted ones too) through a hard-delete view of the table."""
    from lakesync.destinations.statements import TableLayout

    hard = TableLayout("todos", COLUMNS, "hard")
    dest.apply_changes(hard, [typed_change(hard, r, None) for r in ("r1", "r2", "r3", "R1")])
