"""Cursors across shards (lakesync.cursors): one decimal string holding a position per store,
round-tripping, ordered as the TypeScript client compares them, today's cursor for one store."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync import cursors, hlc
from lakesync.errors import ValidationError

position = st.integers(0, hlc.MAX_CURSOR)
layouts = st.integers(1, 5).flatmap(lambda n: st.lists(position, min_size=n, max_size=n))


@given(layouts)
def test_round_trip_through_the_wire(positions: list[int]) -> None:
    text = cursors.to_wire(positions)
    assert text.isdigit()
    assert cursors.parse(text, len(positions)) == tuple(positions)
    assert cursors.decode(cursors.encode(positions), len(positions)) == tuple(positions)


@given(position)
def test_one_store_is_todays_cursor(at: int) -> None:
    assert cursors.to_wire([at]) == str(at)
    assert cursors.parse(str(at), 1) == (at,)


def test_zero_is_the_start_of_every_store() -> None:
    assert cursors.to_wire([0, 0, 0]) == "0"
    assert cursors.parse("0", 3) == (0, 0, 0)


@given(layouts.flatmap(lambda ps: st.tuples(st.just(ps), st.lists(
    st.integers(0, hlc.MAX_CURSOR), min_size=len(ps), max_size=len(ps)))))
def test_ahead_in_every_store_is_the_greater_number(pair: tuple[list[int], list[int]]) -> None:
    # The TypeScript client keeps the greater of two cursors (a broadcast's and its own).
    low, other = pair
    high = [max(a, b) for a, b in zip(low, other, strict=True)]
    assert cursors.encode(high) >= cursors.encode(low)
    if high != low:
        assert cursors.encode(high) > cursors.encode(low)


@given(layouts, layouts)
def test_distinct_positions_are_distinct_cursors(a: list[int], b: list[int]) -> None:
    if len(a) == len(b) and a != b:
        assert cursors.encode(a) != cursors.encode(b)


@given(layouts)
def test_a_cursor_from_fewer_stores_reads_as_the_start_of_the_new_ones(ps: list[int]) -> None:
    assert cursors.parse(cursors.to_wire(ps), len(ps) + 2) == (*ps, 0, 0)


def test_a_cursor_from_more_stores_is_refused() -> None:
    text = cursors.to_wire([5, 7, 9])
    with pytest.raises(ValidationError, match="2 hot-log store"):
        cursors.parse(text, 2)


@pytest.mark.parametrize(
    ("value", "stores"),
    [("-1", 2), ("1e3", 2), ("\uff11\uff12", 2), ("", 2), ("9" * 39, 2), ("9" * 5000, 2),
     (True, 2), (1.5, 2), (None, 2), (str(2**63), 1), ("9" * 21, 1), (-1, 2)],
)
def test_bad_cursors_are_validation_errors(value: object, stores: int) -> None:
    with pytest.raises(ValidationError):
        cursors.parse(value, stores)


def test_an_integer_cursor_is_tolerated() -> None:
    assert cursors.parse(cursors.encode([1, 2]), 2) == (1, 2)


def test_positions_past_an_ingest_stamp_cannot_be_encoded() -> None:
    with pytest.raises(ValueError, match="outside"):
        cursors.encode([0, hlc.MAX_CURSOR + 1])
