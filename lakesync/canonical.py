"""Canonical JSON byte-compatible with JavaScript's fast-json-stable-stringify
(docs/protocol.md §3).

Object keys are sorted at every depth (by UTF-16 code units, as JavaScript's default sort does),
arrays keep their order, there is no whitespace, non-ASCII is written raw, and numbers are
formatted as JavaScript's ``Number.prototype.toString`` does: ``1.0`` → ``1``, ``1e21`` →
``1e+21``, ``1e-7`` → ``1e-7``, ``-0`` → ``0``, NaN and ±Infinity → ``null``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["canonical_json", "js_number_str"]

# Above 2^53 a Python int is not a JavaScript number; JavaScript would hold the nearest double.
_MAX_SAFE_INT = 2**53
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_encode_basestring = json.encoder.encode_basestring  # escapes only quotes, backslash, controls


def js_number_str(x: float) -> str:
    """Format a number exactly as JavaScript's ``String(x)`` does (NaN/Infinity → ``null``)."""
    if isinstance(x, int) and abs(x) <= _MAX_SAFE_INT:
        return str(x)
    if type(x) is float:
        # Between 1e-4 and 1e16 repr() writes the shortest digits without an exponent, as
        # JavaScript does; integral values ("1.0"), exponents, NaN and inf take the long way.
        text = repr(x)
        if text[-1].isdigit() and "e" not in text and not text.endswith(".0"):
            return text
    try:
        f = float(x)
    except OverflowError:
        # JavaScript parses such an integer literal as ±Infinity, which prints as null.
        return "null"
    if math.isnan(f) or math.isinf(f):
        return "null"
    if f == 0:
        return "0"
    sign = "-" if f < 0 else ""
    # repr() yields the shortest round-tripping digits, the same digits JavaScript chooses.
    mantissa, _, exp = repr(abs(f)).partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    digits = int_part + frac_part
    point = len(int_part) + (int(exp) if exp else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    k, n = len(digits), point
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        exp_str = ("+" if e >= 0 else "-") + str(abs(e))
        body = (digits if k == 1 else digits[0] + "." + digits[1:]) + "e" + exp_str
    return sign + body


def _js_string(s: str) -> str:
    """``JSON.stringify`` of a string: raw non-ASCII, lone surrogates escaped (ES2019)."""
    # The C string encoder directly: json.dumps would build a new encoder per call (hot path).
    out: str = _encode_basestring(s)
    if not s.isascii() and _LONE_SURROGATE.search(out):
        out = _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", out)
    return out


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _scalar(value: Any) -> str | None:
    """The canonical text of a string, a safe integer, a boolean or null (most cells), by exact
    type so the common case costs no isinstance chain; None for anything else."""
    kind = type(value)
    if kind is str:
        return _js_string(value)
    if kind is int and -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT:
        return str(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    return None


def _sorted_keys(value: Mapping[Any, Any]) -> list[Any]:
    keys = list(value)
    # Code-point order is UTF-16 order unless a key holds a character above U+D7FF.
    if all(type(k) is str and k.isascii() for k in keys):
        keys.sort()
    else:
        keys.sort(key=lambda k: _utf16_key(str(k)))
    return keys


def _write(value: Any, out: list[str]) -> None:
    text = _scalar(value)
    if text is not None:
        out.append(text)
    elif isinstance(value, str):
        out.append(_js_string(value))
    elif isinstance(value, int | float):
        out.append(js_number_str(value))
    elif isinstance(value, Mapping):
        out.append("{")
        first = True
        for key in _sorted_keys(value):
            if not first:
                out.append(",")
            first = False
            out.append(_js_string(str(key)))
            out.append(":")
            _write(value[key], out)
        out.append("}")
    elif isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def canonical_json(value: Any) -> str:
    """Serialise a JSON value to its canonical text (see the module docstring)."""
    text = _scalar(value)
    if text is not None:
        return text
    out: list[str] = []
    _write(value, out)
    return "".join(out)
