"""Hypothesis strategies for valid RowDeltas, shared by the delta, wire and frame tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from lakesync.delta import Op, RowDelta

identifiers = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,20}", fullmatch=True)
json_values: st.SearchStrategy[Any] = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**53), 2**53),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=10),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=6,
)


KEY_CHARS = st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"])
"""Characters of rowIds and clientIds: anything but NUL and lone surrogates."""


@st.composite
def row_deltas(draw: st.DrawFn) -> RowDelta:
    """A valid delta: identifiers per docs/protocol.md §3, DELETE without columns, any 64-bit
    HLC."""
    op: Op = draw(st.sampled_from(["INSERT", "UPDATE", "DELETE"]))
    cols: dict[str, Any] = (
        {} if op == "DELETE" else draw(st.dictionaries(identifiers, json_values, max_size=4))
    )
    return RowDelta.create(
        op,
        draw(identifiers),
        draw(st.text(KEY_CHARS, min_size=1, max_size=12)),
        draw(st.text(KEY_CHARS, min_size=1, max_size=12)),
        cols,
        draw(st.integers(0, 2**64 - 1)),
    )
