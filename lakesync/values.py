"""Column values (docs/protocol.md §1): what a JSON value may be, and the one form every replica
holds it in.

Every stage (the deltaId, the hot log, pull and WebSocket replies, client replicas, the lake's
landing table and models) must hold the same value. A JavaScript client holds a number as a
double, so a value is kept as what ``JSON.parse(JSON.stringify(JSON.parse(text)))`` gives, in one
Python form: an integral number of magnitude at most 2^53 is an ``int`` (``1.0`` → ``1``,
``-0`` → ``0``), any other number a ``float`` (``2**53 + 1`` → ``9007199254740992``, the double
JavaScript reads; ``10**20`` → ``1e20``). What JavaScript cannot hold as a finite number
(``10**400`` reads as Infinity, which ``JSON.stringify`` turns into null) is rejected rather than
silently changed, and so are values nested deeper than :data:`MAX_VALUE_DEPTH` arrays/objects:
far below the recursion limits of msgspec, ``json``, canonical JSON, SQLite and Spark's JSON
parser, so that anything accepted also serialises everywhere, whatever the caller's stack depth.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from lakesync.errors import ValidationError

__all__ = ["MAX_SAFE_MAGNITUDE", "MAX_VALUE_DEPTH", "normalize_value"]

MAX_VALUE_DEPTH = 64
"""The most arrays/objects a column value may nest (``[[1]]`` nests 2)."""

MAX_SAFE_MAGNITUDE = 2**53
"""Integers up to this magnitude are exact doubles; beyond it a number is held as a float."""

_LOG10_2 = math.log10(2)


def normalize_value(value: Any) -> Any:
    """``value`` as every replica holds it (see the module docstring); the same object if unchanged.

    Raises :class:`ValidationError` for a number JavaScript cannot hold as a finite double
    (NaN, ±Infinity, integers beyond ±1.8e308), for nesting deeper than :data:`MAX_VALUE_DEPTH`,
    and for anything that is not a JSON value (object keys must be strings). The caller adds
    which column of which row.
    """
    kind = type(value)
    if kind is str or value is None or kind is bool:  # most cells: skip a call
        return value
    return _normalize(value, 0)


def _normalize(value: Any, depth: int) -> Any:
    # Exact type checks first: this runs on every cell of every push and every pulled page.
    kind = type(value)
    if kind is str or value is None or kind is bool:
        return value
    if kind is int:
        return value if -MAX_SAFE_MAGNITUDE <= value <= MAX_SAFE_MAGNITUDE else _big_int(value)
    if kind is float:
        return _float(value)
    if kind is dict or kind is list or isinstance(value, list | tuple | Mapping):
        if depth >= MAX_VALUE_DEPTH:
            raise ValidationError(
                f"the value nests more than {MAX_VALUE_DEPTH} levels of arrays/objects"
            )
        if kind is dict or (kind is not list and isinstance(value, Mapping)):
            return _object(value, depth + 1)
        return _array(value, depth + 1)
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return _normalize(int(value), depth)
    if isinstance(value, float):
        return _float(float(value))
    raise ValidationError(f"a {type(value).__name__} is not a JSON value")


def _big_int(value: int) -> int | float:
    try:
        return _number(float(value))
    except OverflowError:
        digits = int(value.bit_length() * _LOG10_2) + 1
        raise ValidationError(
            f"a number of {digits} digits is beyond the range of a JSON number "
            "(JavaScript reads it as Infinity); the largest magnitude is 1.7976931348623157e308"
        ) from None


def _float(value: float) -> int | float:
    if not math.isfinite(value):
        raise ValidationError(f"NaN and Infinity are not JSON numbers (got {value!r})")
    return _number(value)


def _array(value: list[Any] | tuple[Any, ...], depth: int) -> list[Any]:
    out = None if type(value) is list else list(value)
    for i, v in enumerate(value):
        nv = _normalize(v, depth)
        if nv is not v:
            if out is None:
                out = list(value)
            out[i] = nv
    return value if out is None else out  # type: ignore[return-value]


def _object(value: Mapping[Any, Any], depth: int) -> dict[str, Any]:
    out = None if type(value) is dict else dict(value)
    for k, v in value.items():
        if type(k) is not str and not isinstance(k, str):
            raise ValidationError(f"object keys must be strings, got {type(k).__name__} {k!r}")
        nv = _normalize(v, depth)
        if nv is not v:
            if out is None:
                out = dict(value)
            out[k] = nv
    return value if out is None else out  # type: ignore[return-value]


def _number(f: float) -> int | float:
    # A finite double; the integral ones an int holds exactly (up to 2^53) become ints.
    if f.is_integer() and -MAX_SAFE_MAGNITUDE <= f <= MAX_SAFE_MAGNITUDE:
        return int(f)
    return f
