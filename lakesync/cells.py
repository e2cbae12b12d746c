"""Pure cell decoders, one per schema column type (docs/protocol.md §10), plus HLC → time: what
fresh reads (``lakesync/lakehouse/fresh.py``), destinations and the lake's Spark SQL functions
(``lakesync.spark_udfs``) use; the dbt models do the same with Spark built-ins
(``lakesync_decode`` in ``macros/current_state.sql``, held equal by a test), so plain dbt needs no
Python UDF.

Landing cells carry each value as its own JSON text (``value_json``), so a decoder sees exactly what
the client sent. A value of the wrong type for the column decodes to null rather than failing the
whole pipeline run (the gateway rejects such deltas for registered tables; this only guards data
that predates a schema).

A decoder also reads every value of a type that widens to its own (``lakesync.column_types``:
integer → decimal → number, any type → string), so a widened column keeps every value written
before the change: a ``decimal`` column reads an integer, a ``number`` column a decimal's or a
big integer's digits, a ``string`` column any other value as its JSON text. Each typed value is
matched by the regular expressions below, which the SQL macro repeats (Java and Python read them
alike), and converted by :func:`lakesync.column_types.decode_value`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Context, Decimal
from typing import Any

from lakesync.canonical import canonical_json
from lakesync.column_types import (
    INTEGER_MAX,
    INTEGER_MIN,
    MAX_DECIMAL_PRECISION,
    decimal_params,
    decode_value,
)
from lakesync.errors import SchemaError
from lakesync.schema import ColumnSpec

MAX_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z

__all__ = [
    "decoder",
    "hlc_to_timestamp",
    "json_to_boolean",
    "json_to_bytes",
    "json_to_date",
    "json_to_decimal",
    "json_to_double",
    "json_to_integer",
    "json_to_json_text",
    "json_to_string",
    "json_to_timestamp",
]

_EXACT = Context(prec=MAX_DECIMAL_PRECISION + 2)  # a 38-digit decimal quantizes without rounding
_INTEGER = re.compile(r"-?(0|[1-9][0-9]*)")
_DECIMAL = re.compile(r"-?(0|[1-9][0-9]*)(?:[.]([0-9]+))?")
# Year 0000 is no date in Python, nor in the lake's types (0001-01-01 .. 9999-12-31).
_YEAR = r"([0-9]{3}[1-9]|[0-9]{2}[1-9][0-9]|[0-9][1-9][0-9]{2}|[1-9][0-9]{3})"
_DATE = re.compile(_YEAR + r"-[0-9]{2}-[0-9]{2}")
_TIMESTAMP = re.compile(_YEAR + r"-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}[.][0-9]{6}Z")
# Canonical base64 only: the bits a padded final group leaves unused are zero.
_BASE64 = re.compile(
    r"([A-Za-z0-9+/]{4})*([A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?"
)


def _load(value_json: str | None) -> Any:
    return None if value_json is None else json.loads(value_json)


def json_to_string(value_json: str | None) -> str | None:
    """A JSON string's text; null → None; any other value → its JSON text (a column widened to
    ``string`` keeps the values of its old type)."""
    value = _load(value_json)
    if value is None or isinstance(value, str):
        return value
    return canonical_json(value)


def json_to_double(value_json: str | None) -> float | None:
    """A JSON number as a float, and a decimal's or integer's digits (a JSON string: a column
    widened from ``integer`` or ``decimal``); null, booleans and other values → None."""
    value = _load(value_json)
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def json_to_boolean(value_json: str | None) -> bool | None:
    """A JSON boolean; anything else → None."""
    value = _load(value_json)
    return value if isinstance(value, bool) else None


def json_to_json_text(value_json: str | None) -> str | None:
    """A ``json`` column's value as canonical JSON text; JSON null → None (SQL NULL)."""
    value = _load(value_json)
    return None if value is None else canonical_json(value)


def _integer_text(value: Any) -> str | None:
    """The digits of an integer's wire value: a JSON integer number, or a string of digits."""
    if type(value) is int:
        return str(value)
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return value
    return None


def json_to_integer(value_json: str | None) -> int | None:
    """An ``integer`` (a JSON integer number, or a JSON string of its digits) as an int; a
    value out of the 64-bit range or of another type → None."""
    digits = _integer_text(_load(value_json))
    if digits is None:
        return None
    number = int(digits)
    return number if INTEGER_MIN <= number <= INTEGER_MAX else None


def json_to_decimal(value_json: str | None, precision: int, scale: int) -> Decimal | None:
    """A ``decimal(precision, scale)`` (a JSON string in plain notation) as a Decimal with
    ``scale`` fraction digits; also an integer (a column widened from ``integer``) and a
    narrower decimal's text (fewer fraction digits). More than ``precision - scale`` integer
    digits, more than ``scale`` fraction digits (it would need rounding) or another type →
    None."""
    value = _load(value_json)
    text = _integer_text(value)
    if text is None:
        match = _DECIMAL.fullmatch(value) if isinstance(value, str) else None
        if match is None or len(match.group(2) or "") > scale:
            return None
        text = value
    whole = text.lstrip("-").split(".")[0]
    if whole != "0" and len(whole) > precision - scale:
        return None
    number = Decimal(text).quantize(Decimal(1).scaleb(-scale), context=_EXACT)
    return abs(number) if number == 0 else number  # no negative zero, as Spark has none


_TIMESTAMP_SPEC = ColumnSpec("value", "timestamp")
_DATE_SPEC = ColumnSpec("value", "date")
_BYTES_SPEC = ColumnSpec("value", "bytes")


def _matched(value_json: str | None, pattern: re.Pattern[str], spec: ColumnSpec) -> Any:
    """The value of a JSON string matching ``pattern``, decoded as ``spec``'s type; an
    impossible value (February 30th) or another JSON value → None."""
    value = _load(value_json)
    if not isinstance(value, str) or not pattern.fullmatch(value):
        return None
    try:
        return decode_value(spec, value)
    except SchemaError:
        return None


def json_to_timestamp(value_json: str | None) -> datetime | None:
    """A ``timestamp`` (a JSON string ``YYYY-MM-DDTHH:MM:SS.ffffffZ``) as an aware UTC
    datetime; an impossible date or time, or another type → None."""
    found: datetime | None = _matched(value_json, _TIMESTAMP, _TIMESTAMP_SPEC)
    return found


def json_to_date(value_json: str | None) -> date | None:
    """A ``date`` (a JSON string ``YYYY-MM-DD``) as a date; an impossible date or another type
    → None."""
    found: date | None = _matched(value_json, _DATE, _DATE_SPEC)
    return found


def json_to_bytes(value_json: str | None) -> bytes | None:
    """A ``bytes`` value (a JSON string of canonical standard base64) as bytes; another value
    → None."""
    found: bytes | None = _matched(value_json, _BASE64, _BYTES_SPEC)
    return found


def _null(_: str | None) -> None:
    return None


_PLAIN: dict[str, Callable[[str | None], Any]] = {
    "string": json_to_string,
    "number": json_to_double,
    "boolean": json_to_boolean,
    "json": json_to_json_text,
    "null": _null,
    "integer": json_to_integer,
    "timestamp": json_to_timestamp,
    "date": json_to_date,
    "bytes": json_to_bytes,
}


def decoder(spec: ColumnSpec) -> Callable[[str | None], Any]:
    """The decoder of a column: its cell's JSON text → its typed value (json as canonical
    text), as the models' ``lakesync_decode`` types it."""
    if spec.type == "decimal":
        precision, scale = decimal_params(spec)
        return lambda value_json: json_to_decimal(value_json, precision, scale)
    return _PLAIN[spec.type]


def hlc_to_timestamp(hlc: int | Decimal | None) -> datetime | None:
    """The wall-clock part of an HLC (top 48 bits, Unix milliseconds) as an aware UTC datetime.

    48-bit wall times reach the year 10889; past 9999-12-31 (no timestamp type holds it) → None.
    """
    if hlc is None:
        return None
    wall_ms = int(hlc) >> 16
    if wall_ms > MAX_TIMESTAMP_MS:
        return None
    return datetime.fromtimestamp(wall_ms / 1000, tz=UTC)
