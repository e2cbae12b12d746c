"""Source values as the Python values of their columns' types: pure, shared by the sources.

A source hands over what its driver or API gave (``int``, ``decimal.Decimal``, ``datetime``,
``bytes``, ISO 8601 text from a JSON API, …); :func:`fit_value` turns it into the Python value
of the column's declared type, which :func:`lakesync.column_types.encode_value` accepts (a
value that cannot be turned is left as it is, so the encoding refuses it naming the column and
the table's contract decides: :mod:`lakesync.connectors._contract`).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import re
import uuid
from typing import Any

__all__ = ["fit_value", "json_value"]

_INTEGER_TEXT = re.compile(r"-?[0-9]{1,19}")


def json_value(value: Any) -> Any:
    """``value`` as a JSON value (inside a ``json`` column, and row ids): decimals as numbers
    (as text when a double would round them), times as ISO 8601 text, UUIDs and other
    scalars as text, bytes as hex; JSON documents and numbers as they are."""
    match value:
        case None | bool() | int() | float() | str():
            return value
        case decimal.Decimal():
            # A number when the double holds it exactly, else its exact text.
            exact = value.is_finite() and decimal.Decimal(float(value)) == value
            return float(value) if exact else format(value, "f")
        case dt.datetime() | dt.date() | dt.time():
            return value.isoformat()
        case dt.timedelta():
            return value.total_seconds()
        case bytes() | bytearray() | memoryview():
            return bytes(value).hex()
        case uuid.UUID():
            return str(value)
        case dict():
            return {str(k): json_value(v) for k, v in value.items()}
        case list() | tuple():
            return [json_value(v) for v in value]
        case _:
            return str(value)


def _text(value: Any) -> str:
    """A value as a ``string`` column holds it (the column's text when its type is unmapped
    or a declared ``string`` wins over the source's type)."""
    match value:
        case str():
            return value
        case bool():
            return "true" if value else "false"
        case decimal.Decimal():
            return format(value, "f")
        case dt.datetime() if value.tzinfo is not None:
            return value.astimezone(dt.UTC).isoformat()
        case dt.datetime() | dt.date() | dt.time():
            return value.isoformat()
        case bytes() | bytearray() | memoryview():
            return base64.b64encode(bytes(value)).decode("ascii")
        case dict() | list() | tuple():
            return json.dumps(json_value(value), ensure_ascii=False, separators=(",", ":"))
        case _:
            return str(value)


def _instant(value: Any) -> Any:
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            return value
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)  # a zone-less source time is read as UTC
    return value


def _day(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            return value
    return value


def _decimal(value: Any) -> Any:
    if isinstance(value, float | str) and not isinstance(value, bool):
        try:
            return decimal.Decimal(str(value))
        except decimal.InvalidOperation:
            return value
    return value


def _integer(value: Any) -> Any:
    if isinstance(value, str) and _INTEGER_TEXT.fullmatch(value):
        return int(value)  # a declared integer over a text source column
    if isinstance(value, decimal.Decimal | float) and math.isfinite(value) and value == int(value):
        return int(value)
    return value


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:  # MySQL drivers hand JSON documents over as text
            return json.loads(value)
        except ValueError:
            return value
    return json_value(value)


def fit_value(typ: str, value: Any) -> Any:
    """A source value as the Python value of a ``typ`` column (see the module docstring)."""
    if value is None:
        return None
    match typ:
        case "string":
            return _text(value)
        case "integer":
            return _integer(value)
        case "decimal":
            return _decimal(value)
        case "number":
            return float(value) if isinstance(value, decimal.Decimal) else value
        case "boolean":
            # MySQL's BOOLEAN is tinyint(1): drivers hand it over as 0/1.
            return bool(value) if type(value) is int and value in (0, 1) else value
        case "timestamp":
            return _instant(value)
        case "date":
            return _day(value)
        case "bytes":
            return bytes(value) if isinstance(value, bytearray | memoryview) else value
        case "json":
            return _json(value)
    return value
