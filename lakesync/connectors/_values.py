"""Database values as JSON column values: pure, shared by the database sources."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from typing import Any

__all__ = ["column_type", "json_value", "typed_value"]

_NUMBER = ("int", "numeric", "decimal", "real", "double", "float", "serial", "money")


def json_value(value: Any) -> Any:
    """``value`` as a JSON value: decimals as numbers, times as ISO 8601 text, UUIDs and
    other scalars as text, bytes as hex; JSON documents and numbers as they are."""
    match value:
        case None | bool() | int() | float() | str():
            return value
        case decimal.Decimal():
            return float(value)
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


def column_type(data_type: str, column_type_text: str = "") -> str:
    """A gateway column type for an ``information_schema.columns.data_type`` (MySQL's
    ``tinyint(1)`` and PostgreSQL's ``boolean`` are booleans)."""
    t = data_type.lower()
    if t in ("boolean", "bool") or column_type_text.lower() == "tinyint(1)":
        return "boolean"
    if t in ("json", "jsonb"):
        return "json"
    if any(t.startswith(n) or n in t for n in _NUMBER):
        return "number"
    return "string"


def typed_value(value: Any, typ: str) -> Any:
    """``value`` (from :func:`json_value`) as a ``typ`` column holds it: drivers hand MySQL
    booleans over as 0/1 and MySQL JSON documents as text."""
    if typ == "boolean" and isinstance(value, int) and not isinstance(value, bool):
        return bool(value)
    if typ == "json" and isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
