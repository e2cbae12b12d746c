"""How column values live in SQLite columns, and how they come back out.

Each schema type maps to a declared SQLite type whose first word names a converter
(``sqlite3.PARSE_DECLTYPES``), so a plain ``SELECT`` through the client's connection returns
booleans as ``bool``, JSON columns as decoded objects, decimals as ``decimal.Decimal``,
timestamps as aware ``datetime`` (UTC) and dates as ``datetime.date``, also inside joins. The
second word gives the column its SQLite affinity (booleans are INTEGER so ``done = 1`` and
``done = ?`` with ``True`` both match). Integers are SQLite's own 64-bit integers and bytes
BLOBs. Decimals and timestamps are stored as their canonical text (lakesync.column_types):
exact, and timestamps (fixed width, UTC) compare and sort as instants.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import sqlite3
from collections.abc import Callable
from functools import partial
from typing import Any

import msgspec

from lakesync.column_types import check_wire_value, decode_value, encode_value
from lakesync.errors import SchemaError
from lakesync.schema import ColumnSpec, ColumnType

__all__ = [
    "SQL_TYPES",
    "decode_json",
    "encode_json",
    "infer_type",
    "python_row",
    "python_value",
    "register_converters",
    "sql_converter",
    "to_sql_value",
    "wire_values",
]

SQL_TYPES: dict[str, str] = {
    "string": "TEXT",
    # NUMERIC keeps 30 an integer and 30.5 a real, as JSON and JavaScript see them.
    "number": "NUMERIC",
    "boolean": "LSBOOL INTEGER",
    "json": "LSJSON TEXT",
    "null": "LSJSON TEXT",
    "integer": "INTEGER",
    "decimal": "LSDECIMAL TEXT",
    "timestamp": "LSTIMESTAMP TEXT",
    "date": "LSDATE TEXT",
    "bytes": "BLOB",
}
_TYPED = frozenset({"integer", "decimal", "timestamp", "date", "bytes"})
# Types whose wire value may differ from the Python value (number and string: a value written
# before the column was widened).
_DECODED = _TYPED | {"number", "string"}
_TIMESTAMP = ColumnSpec("timestamp", "timestamp")

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
    sqlite3.register_converter("LSDECIMAL", lambda raw: decimal.Decimal(raw.decode()))
    sqlite3.register_converter("LSTIMESTAMP", _timestamp_converter)
    sqlite3.register_converter("LSDATE", lambda raw: dt.date.fromisoformat(raw.decode()))


def _timestamp_converter(raw: bytes) -> dt.datetime:
    return decode_value(_TIMESTAMP, raw.decode())  # type: ignore[no-any-return]


def to_sql_value(spec: ColumnSpec, value: Any) -> Any:
    """The SQLite value stored for the wire value ``value`` in a column of ``spec``'s type.

    Never raises for a value normalised by :func:`lakesync.values.normalize_value` (as every
    value from a gateway is, see :func:`lakesync.delta.read_delta`), nor for an integer of any
    size; a value a typed column cannot hold (only a gateway that skipped the checks sends one)
    is stored as NULL, as the row's Python values read it (:func:`python_value`).
    """
    if value is None:
        return None
    typ = spec.type
    if typ in _TYPED:
        if typ in ("decimal", "timestamp"):
            # Held as canonical text: exact, and it sorts as the type does. A value the gateway
            # accepted is canonical already; one from before a widening is written anew.
            try:
                check_wire_value(spec, value)
                return value
            except SchemaError:
                held = python_value(spec, value)
                return None if held is None else encode_value(spec, held)
        held = python_value(spec, value)
        return held.isoformat() if isinstance(held, dt.date) else held
    if (typ == "string") != (type(value) is str) and typ in ("string", "number"):
        value = python_value(spec, value)  # written before a widening: as get() reads it
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


def sql_converter(spec: ColumnSpec) -> Callable[[Any], Any]:
    """:func:`to_sql_value` for the column ``spec``, as one function: the values its type most
    often holds (text in a ``string`` column, a boolean in a ``boolean`` one, a float or a 64-bit
    integer in a ``number`` one) are converted without the general checks, every other value
    goes through them. A first sync converts millions of cells."""
    general = partial(to_sql_value, spec)
    if spec.type == "string":
        return lambda v: v if type(v) is str else general(v)
    if spec.type == "boolean":
        return lambda v: int(v) if type(v) is bool else general(v)
    if spec.type == "number":
        return lambda v: (
            v
            if type(v) is float or (type(v) is int and -_INT64_MAX - 1 <= v <= _INT64_MAX)
            else general(v)
        )
    return general


def python_value(spec: ColumnSpec, value: Any) -> Any:
    """The Python value of a wire value in a column of ``spec`` (lakesync.column_types); None
    for a value the column's type cannot hold."""
    try:
        return decode_value(spec, value)
    except SchemaError:
        return None


def python_row(specs: dict[str, ColumnSpec], row: dict[str, Any] | None) -> dict[str, Any] | None:
    """A visible row's wire values as Python values (columns without a spec as they are)."""
    if row is None:
        return None
    out = dict(row)
    for name, value in row.items():
        spec = specs.get(name)
        if spec is not None and spec.type in _DECODED:
            out[name] = python_value(spec, value)
    return out


def wire_values(specs: dict[str, ColumnSpec], values: Any) -> dict[str, Any]:
    """Python values written by the app as their columns' canonical wire values; raises
    :class:`SchemaError` for a value its column's type cannot hold (columns without a spec as
    they are: the delta check names them)."""
    out = dict(values)
    for name, value in out.items():
        spec = specs.get(name)
        if spec is not None:
            out[name] = encode_value(spec, value)
    return out


def infer_type(value: Any) -> ColumnType:
    """The schema type a column gets when a remote delta introduces it without a schema."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "json"
