"""Pure cell decoders, one per schema column type (docs/protocol.md §10), plus HLC → time: what
fresh reads (``lakesync/lakehouse/fresh.py``) and destinations use; the dbt models do the same with
Spark built-ins (``lakesync_decode`` in ``macros/current_state.sql``, held equal by a test), so
plain dbt needs no Python UDF.

Landing cells carry each value as its own JSON text (``value_json``), so a decoder sees exactly what
the client sent. A value of the wrong type for the column decodes to null rather than failing the
whole pipeline run (the gateway rejects such deltas for registered tables; this only guards data
that predates a schema).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from lakesync.canonical import canonical_json

MAX_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z

__all__ = [
    "hlc_to_timestamp",
    "json_to_boolean",
    "json_to_double",
    "json_to_json_text",
    "json_to_string",
]


def _load(value_json: str | None) -> Any:
    return None if value_json is None else json.loads(value_json)


def json_to_string(value_json: str | None) -> str | None:
    """A JSON string's text; null and non-strings → None."""
    value = _load(value_json)
    return value if isinstance(value, str) else None


def json_to_double(value_json: str | None) -> float | None:
    """A JSON number as a float; null, booleans and non-numbers → None."""
    value = _load(value_json)
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
