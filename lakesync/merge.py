"""Column-level last-writer-wins merge with row tombstones and revival (docs/protocol.md §4).

The state is a join-semilattice: per cell the greatest ``(hlc, client_id)`` write, per row the
greatest DELETE clock (tombstone) and the greatest write clock. Joining is commutative,
associative and idempotent, so the merged state is a pure function of the *set* of deltas.

Reading the state: a row is live when its greatest write clock beats its tombstone (a DELETE
wins an exact clock tie); a live row shows only the cells written after the tombstone, so a
revived row does not resurrect cells from before its deletion (they read as null).

A replica of a gateway with sync rules also receives *view evictions*
(:func:`lakesync.delta.is_view_eviction`): not part of any row's history but an instruction to
forget what the replica holds of a row (it left the view, or its real state follows).
:meth:`MergedState.apply` honours them; gateways never store one (their client id is reserved).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgspec

from lakesync.canonical import canonical_json
from lakesync.delta import RowDelta, is_view_eviction

__all__ = [
    "Cell",
    "Clock",
    "MergedState",
    "RowChange",
    "RowState",
    "apply_delta",
    "decode_row_state",
    "encode_row_state",
    "encode_row_state_binary",
    "join_delta",
    "merge_state",
]

Clock = tuple[int, str]
"""An LWW order key: ``(hlc, client_id)``; compare as tuples."""


class Cell(msgspec.Struct, array_like=True, gc=False):
    """The winning write of one cell: its value and the clock that wrote it (stored as
    ``[value, hlc, client_id]``)."""

    value: Any
    hlc: int
    client_id: str

    @property
    def clock(self) -> Clock:
        """The cell's ``(hlc, client_id)`` order key."""
        return (self.hlc, self.client_id)


def _beats(clock: Clock, other: Clock | None) -> bool:
    return other is None or clock > other


class RowState(msgspec.Struct, gc=False):
    """Everything the merge keeps about one row; stores keep it as msgspec JSON
    (:func:`encode_row_state`), its fields named ``c``, ``w`` and ``t``."""

    cells: dict[str, Cell] = msgspec.field(default_factory=dict, name="c")
    write: Clock | None = msgspec.field(default=None, name="w")
    tombstone: Clock | None = msgspec.field(default=None, name="t")

    @property
    def live(self) -> bool:
        """Whether the row exists: some write beats the latest DELETE."""
        return self.write is not None and _beats(self.write, self.tombstone)

    def visible(self) -> dict[str, Any] | None:
        """The row's columns as readers see them, or None when the row is absent."""
        if not self.live:
            return None
        t = self.tombstone
        if t is None:  # most rows were never deleted: every cell shows
            return {name: c.value for name, c in self.cells.items()}
        return {name: c.value for name, c in self.cells.items() if _beats(c.clock, t)}


_state_encoder = msgspec.json.Encoder()
# Not strict: states written before they were Structs carry each HLC as a decimal string.
_state_decoder = msgspec.json.Decoder(RowState, strict=False)


def encode_row_state(state: RowState) -> bytes:
    """A row state's stored JSON form (HLCs as JSON integers: exact, msgspec reads any size)."""
    return _state_encoder.encode(state)


_binary_encoder = msgspec.msgpack.Encoder()
_binary_decoder = msgspec.msgpack.Decoder(RowState)


def encode_row_state_binary(state: RowState) -> bytes:
    """A row state's compact stored form: the fields of :func:`encode_row_state` in msgpack
    (about two thirds of the JSON's bytes, encoded in C), read back by :func:`decode_row_state`.
    A client replica stores a row's state this way: a first sync writes a million of them. A
    value msgpack cannot hold (an integer beyond 64 bits, never a normalised value) keeps the
    JSON form."""
    try:
        return _binary_encoder.encode(state)
    except OverflowError:
        return _state_encoder.encode(state)


def decode_row_state(raw: bytes | str | memoryview) -> RowState:
    """Read a state written by :func:`encode_row_state` (or by earlier versions, with HLCs as
    decimal strings) or by :func:`encode_row_state_binary`."""
    # JSON text starts with "{" (or whitespace); a msgpack map with a byte >= 0x80.
    if not isinstance(raw, str) and len(raw) and raw[0] >= 0x80:
        return _binary_decoder.decode(raw)
    return _state_decoder.decode(raw)


@dataclass(frozen=True, slots=True)
class RowChange:
    """What applying a delta did to the visible row: ``before`` and ``after`` (None = absent)."""

    before: dict[str, Any] | None
    after: dict[str, Any] | None

    @property
    def changed(self) -> bool:
        """Whether anything a reader can see changed."""
        return (self.before is None) != (self.after is None) or bool(self.changed_columns)

    @property
    def created(self) -> bool:
        """The row appeared (insert or revival)."""
        return self.before is None and self.after is not None

    @property
    def deleted(self) -> bool:
        """The row disappeared."""
        return self.before is not None and self.after is None

    @property
    def changed_columns(self) -> set[str]:
        """Columns whose visible value differs (a column absent on one side reads as null)."""
        b, a = self.before or {}, self.after or {}
        return {
            k
            for k in b.keys() | a.keys()
            if k not in a or k not in b or canonical_json(a[k]) != canonical_json(b[k])
        }


def _wins(new: Cell, old: Cell) -> bool:
    if new.clock != old.clock:
        return new.clock > old.clock
    # Same clock, different value: only a misbehaving client does this; stay deterministic.
    return canonical_json(new.value) > canonical_json(old.value)


def join_delta(row: RowState, delta: RowDelta) -> None:
    """Join one delta into ``row`` (in place): :func:`apply_delta` without reporting the
    visible row before and after, for callers that need only the state."""
    clock: Clock = (delta.hlc, delta.client_id)
    if delta.op == "DELETE":
        if _beats(clock, row.tombstone):
            row.tombstone = clock
        return
    if _beats(clock, row.write):
        row.write = clock
    for col in delta.columns:
        new = Cell(col.value, delta.hlc, delta.client_id)
        old = row.cells.get(col.column)
        if old is None or _wins(new, old):
            row.cells[col.column] = new


def apply_delta(row: RowState, delta: RowDelta) -> RowChange:
    """Join one delta into ``row`` (in place) and report the visible before/after."""
    before = row.visible()
    join_delta(row, delta)
    return RowChange(before, row.visible())


class MergedState:
    """The merged state of many rows, built incrementally one delta at a time."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], RowState] = {}

    def apply(self, delta: RowDelta) -> RowChange:
        """Apply one delta (or view eviction) and report how its row's visible state changed."""
        key = (delta.table, delta.row_id)
        row = self.rows.get(key)
        if is_view_eviction(delta):
            self.rows.pop(key, None)
            return RowChange(None if row is None else row.visible(), None)
        if row is None:
            row = self.rows[key] = RowState()
        return apply_delta(row, delta)

    def live_rows(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Every live row's visible columns, keyed by ``(table, row_id)``."""
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for key, row in self.rows.items():
            vis = row.visible()
            if vis is not None:
                out[key] = vis
        return out


def merge_state(deltas: Iterable[RowDelta]) -> dict[tuple[str, str], dict[str, Any]]:
    """The live rows defined by a set of deltas, independent of their order and duplicates."""
    state = MergedState()
    for d in deltas:
        state.apply(d)
    return state.live_rows()
