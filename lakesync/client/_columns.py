"""How JSON column values live in SQLite columns, and how they come back out.

Each schema type maps to a declared SQLite type whose first word names a converter
(``sqlite3.PARSE_DECLTYPES``), so a plain ``SELECT`` through the client's connection returns
booleans as ``bool`` and JSON columns as decoded objects, also inside joins. The second word
gives the column its SQLite affinity (booleans are INTEGER so ``done = 1`` and ``done = ?``
with ``True`` both match).
"""

from __future__ import annotations

import math
import sqlite3
from typing import Any

import msgspec

from lakesync.schema import ColumnType

__all__ = [
    "SQL_TYPES",
    "decode_json",
    "encode_json",
    "infer_type",
    "register_converters",
    "to_sql_value",
]

SQL_TYPES: dict[str, str] = {
    "string": "TEXT",
    # NUMERIC keeps 30 an integer and 30.5 a real, as JSON and JavaScript see them.
    "number": "NUMERIC",
    "boolean": "LSBOOL INTEGER",
    "json": "LSJSON TEXT",
    "null": "LSJSON TEXT",
}

_INT64_MAX = (1 << 63) - 1
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


def encode_json(value: Any) -> str:
    """Compact JSON text of a column value."""
    return _encoder.encode(value).decode()


def decode_json(text: str | bytes) -> Any:
    """The column value encoded by :func:`encode_json`."""
    return _decoder.decode(text)


def _bool_converter(raw: bytes) -> bool:
    return raw not in (b"0", b"0.0")


def register_converters() -> None:
    """Register the decoders for the declared types in :data:`SQL_TYPES` (idempotent).

    ``sqlite3`` converters are process-global; the ``LS`` prefix keeps ours from touching
    anybody else's columns.
    """
    sqlite3.register_converter("LSBOOL", _bool_converter)
    sqlite3.register_converter("LSJSON", decode_json)


def to_sql_value(typ: str, value: Any) -> Any:
    """The SQLite value stored for ``value`` in a column of schema type ``typ``.

    Never raises for a value normalised by :func:`lakesync.values.normalize_value` (as every
    value from a gateway is, see :func:`lakesync.delta.read_delta`), nor for an integer of any size.
    """
    if value is None:
        return None
    if typ in ("json", "null"):
        return encode_json(value)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and not -_INT64_MAX - 1 <= value <= _INT64_MAX:
        # SQLite integers are 64-bit; JavaScript holds such a number as the nearest double, and
        # past the double range as ±Infinity (a REAL to SQLite): never an OverflowError here.
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if isinstance(value, dict | list):
        return encode_json(value)
    return value


def infer_type(value: Any) -> ColumnType:
    """The schema type a column gets when a remote delta introduces it without a schema."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "json"
