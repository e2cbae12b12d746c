"""Pull cursors across shards: one position per hot-log store, carried as one decimal string.

A deployment whose tables are spread over several stores (:mod:`lakesync.shard_specs`) has one
ingest clock per store, so a client's place in the log is a position per store. The client holds
it as one opaque value, still a decimal string on the v1 wire (docs/protocol.md §1, §6): the
positions are the digits of one number in base 2^63, the default store's the lowest::

    value = positions[0] + positions[1] * 2^63 + positions[2] * 2^126 + ...

so that

- with one store the cursor is exactly that store's ingest position, today's cursor;
- ``0`` is "from the start" in every store (the TypeScript client's first-sync test);
- a cursor that is ahead in every store is the greater number (the TypeScript client keeps the
  greater of two cursors), and every value below ``2^(63 * stores)`` decodes to one tuple;
- a cursor issued before a store was added reads as position 0 in it (its tables are read from
  their start: repeated, never skipped); one issued with more stores than are configured now is
  refused (:func:`decode` raises).

Each position is an ingest HLC, at most :data:`lakesync.hlc.MAX_CURSOR`. Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from lakesync import hlc
from lakesync.errors import ValidationError

__all__ = ["POSITION_BITS", "decode", "encode", "parse", "to_wire"]

POSITION_BITS = 63
"""Bits per store position: ingest HLCs are kept as signed 64-bit integers."""
_MASK = (1 << POSITION_BITS) - 1
_DIGITS_PER_STORE = 19  # 2^63 - 1 has 19 decimal digits


def encode(positions: Sequence[int]) -> int:
    """The cursor holding ``positions`` (one per store, the default store's first)."""
    value = 0
    for index, position in enumerate(positions):
        if not 0 <= position <= hlc.MAX_CURSOR:
            raise ValueError(f"store position {position} is outside 0..2^63-1")
        value |= position << (POSITION_BITS * index)
    return value


def decode(value: int, stores: int, field: str = "since") -> tuple[int, ...]:
    """The position in each of ``stores`` stores that ``value`` holds; a value past what that
    many stores hold (issued with more stores, or made up) is a :class:`ValidationError`."""
    if stores < 1:
        raise ValueError("a cursor covers at least one store")
    if not 0 <= value < 1 << (POSITION_BITS * stores):
        raise ValidationError(
            f"{field} is not a cursor of this deployment's {stores} hot-log store(s)"
        )
    return tuple((value >> (POSITION_BITS * i)) & _MASK for i in range(stores))


def parse(value: object, stores: int, field: str = "since") -> tuple[int, ...]:
    """Read a cursor from the wire (a decimal string or, tolerated, a JSON integer) as one
    position per store. With one store this is :func:`lakesync.hlc.parse_cursor` exactly."""
    if stores == 1:
        return (hlc.parse_cursor(value, field),)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValidationError(f"{field} must be a decimal string")
    if isinstance(value, str):
        if not value.isascii() or not value.isdigit():
            raise ValidationError(f"{field} must be a decimal string of digits, got {value[:80]!r}")
        # Longer than any cursor of this many stores: refused before converting a long text.
        value = int(value) if len(value) <= _DIGITS_PER_STORE * stores else -1
    return decode(value, stores, field)


def to_wire(positions: Sequence[int]) -> str:
    """The decimal string a client holds for ``positions``."""
    return str(encode(positions))
