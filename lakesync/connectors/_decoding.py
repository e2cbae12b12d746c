"""PostgreSQL's ``test_decoding`` output plugin, parsed: pure, no I/O.

A change line looks like::

    table public.items: INSERT: id[integer]:1 name[text]:'it''s' doc[jsonb]:'{"a": 1}' x[text]:null
    table public.items: UPDATE: old-key: id[integer]:1 new-tuple: id[integer]:2 name[text]:'b'
    table public.items: DELETE: id[integer]:2

Identifiers are quoted as PostgreSQL quotes them; numbers and booleans print bare, every other
value as a quoted literal (``''`` for a quote); an unchanged TOASTed value prints as
``unchanged-toast-datum`` and is left out of the tuple. ``BEGIN``/``COMMIT`` lines and
``TRUNCATE`` are not row changes (:func:`parse_change` returns None for the first and a
:class:`RowChange` with ``op`` ``TRUNCATE`` for the second).

Each value is read by the type name printed with it (``test_decoding`` prints names, not type
OIDs) into the Python value the driver would have given for the column (:func:`typed`), so a
change and a first load of the same row encode alike.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RowChange", "parse_array", "parse_change", "typed"]


def _bytea(text: str) -> Any:
    return bytes.fromhex(text[2:]) if text.startswith("\\x") else text


def _instant(text: str) -> Any:
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return text  # infinity, BC: left as text, which the column's encoding refuses


def _day(text: str) -> Any:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return text


def _number(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        return float(text)


_READERS: dict[str, Callable[[str], Any]] = {
    "smallint": int,
    "integer": int,
    "bigint": int,
    "oid": int,
    "numeric": decimal.Decimal,
    "real": _number,
    "double precision": _number,
    "boolean": lambda t: t in ("true", "t"),
    "json": json.loads,
    "jsonb": json.loads,
    "bytea": _bytea,
    "date": _day,
    "timestamp with time zone": _instant,
    "timestamp without time zone": _instant,
}


@dataclass(frozen=True, slots=True)
class RowChange:
    """One decoded row change: ``new`` for INSERT/UPDATE, ``old`` (the replica identity)
    for DELETE and for an UPDATE that changed the key."""

    schema: str
    table: str
    op: str
    new: dict[str, Any] = field(default_factory=dict)
    old: dict[str, Any] = field(default_factory=dict)


def typed(text: str | None, typ: str) -> Any:
    """A printed value of type ``typ`` (as ``test_decoding`` names it) as the driver's Python
    value: integers, ``Decimal``, floats, booleans, JSON documents, ``bytes``, dates and
    datetimes (with their offset), arrays as lists; the rest (text, uuid, enums, time) as
    text."""
    if text is None:
        return None
    if typ.endswith("[]"):
        return parse_array(text, typ[:-2])
    reader = _READERS.get(typ)
    return text if reader is None else reader(text)


def parse_array(text: str, element: str) -> list[Any]:
    """A PostgreSQL array literal (``{1,2,NULL}``, ``{"a b","c\\"d"}``, nested braces for
    more dimensions) as a list of ``element`` values (:func:`typed`)."""
    if "=" in text and text.startswith("["):  # explicit bounds: [0:1]={…}
        text = text.split("=", 1)[1]
    out, i = _array(text, 0, element)
    if i != len(text):
        raise ValueError(f"trailing text in array literal {text[:200]!r}")
    return out


def _array(s: str, i: int, element: str) -> tuple[list[Any], int]:
    if s[i] != "{":
        raise ValueError(f"expected '{{' at {i} in array literal {s[:200]!r}")
    i += 1
    out: list[Any] = []
    while i < len(s) and s[i] != "}":
        if s[i] == "{":
            nested, i = _array(s, i, element)
            out.append(nested)
        elif s[i] == '"':
            chars, i = [], i + 1
            while s[i] != '"':
                if s[i] == "\\":
                    i += 1
                chars.append(s[i])
                i += 1
            out.append(typed("".join(chars), element))
            i += 1
        else:
            j = i
            while s[j] not in ",}":
                j += 1
            raw = s[i:j].strip()
            out.append(None if raw == "NULL" else typed(raw, element))
            i = j
        if i < len(s) and s[i] == ",":
            i += 1
    return out, i + 1


class _Reader:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def ident(self, stop: str) -> str:
        if self.s.startswith('"', self.i):
            out = []
            self.i += 1
            while True:
                j = self.s.index('"', self.i)
                out.append(self.s[self.i : j])
                if self.s.startswith('"', j + 1):
                    out.append('"')
                    self.i = j + 2
                    continue
                self.i = j + 1
                return "".join(out)
        j = self.s.index(stop, self.i)
        name = self.s[self.i : j]
        self.i = j
        return name

    def expect(self, token: str) -> None:
        if not self.s.startswith(token, self.i):
            raise ValueError(f"expected {token!r} at {self.i} in {self.s[:200]!r}")
        self.i += len(token)

    def value(self) -> tuple[bool, str | None]:
        """(present, text); an unchanged TOAST datum is not present."""
        s, i = self.s, self.i
        if s.startswith("'", i):
            out = []
            i += 1
            while True:
                j = s.index("'", i)
                out.append(s[i:j])
                if s.startswith("'", j + 1):
                    out.append("'")
                    i = j + 2
                    continue
                self.i = j + 1
                return True, "".join(out)
        j = s.find(" ", i)
        j = len(s) if j < 0 else j
        raw = s[i:j]
        self.i = j
        if raw == "null":
            return True, None
        if raw == "unchanged-toast-datum":
            return False, None
        if raw.startswith("B'"):
            return True, raw[2:-1]
        return True, raw

    def tuple(self, until: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        while self.i < len(self.s):
            if until is not None and self.s.startswith(until, self.i):
                self.i += len(until)
                break
            name = self.ident("[")
            self.expect("[")
            end = self.s.index("]:", self.i)
            typ = self.s[self.i : end]
            self.i = end + 2
            present, text = self.value()
            if present:
                out[name] = typed(text, typ)
            if self.s.startswith(" ", self.i):
                self.i += 1
        return out


def parse_change(line: str) -> RowChange | None:
    """One ``test_decoding`` line as a change; None for transaction boundaries."""
    if not line.startswith("table "):
        return None
    r = _Reader(line)
    r.i = len("table ")
    schema = r.ident(".")
    r.expect(".")
    table = r.ident(":")
    r.expect(": ")
    op = r.ident(":")
    r.expect(":")
    if r.s.startswith(" ", r.i):
        r.i += 1
    rest = r.s[r.i :]
    if op == "TRUNCATE" or rest.startswith("(no-tuple-data)"):
        return RowChange(schema, table, op)
    if op == "DELETE":
        return RowChange(schema, table, op, old=r.tuple())
    if op == "UPDATE" and rest.startswith("old-key: "):
        r.i += len("old-key: ")
        old = r.tuple(until="new-tuple: ")
        return RowChange(schema, table, op, new=r.tuple(), old=old)
    return RowChange(schema, table, op, new=r.tuple())
