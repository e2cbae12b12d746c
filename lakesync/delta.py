"""Row deltas (SPEC §3): the unit of change, its deltaId, and extraction from row pairs."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

import msgspec

from lakesync import hlc as _hlc
from lakesync.canonical import canonical_json
from lakesync.errors import SchemaError, ValidationError

__all__ = [
    "MAX_ROW_ID_LENGTH",
    "ColumnValue",
    "Op",
    "RowDelta",
    "WireColumn",
    "WireDelta",
    "delta_id",
    "extract_delta",
    "validate_identifier",
    "validate_row_id",
]

Op = Literal["INSERT", "UPDATE", "DELETE"]
_OPS: frozenset[str] = frozenset(get_args(Op))
_IDENTIFIER = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]{0,63}")
MAX_ROW_ID_LENGTH = 1024


def validate_identifier(name: object, what: str) -> str:
    """Return ``name`` if it is a valid table/column identifier, else raise :class:`SchemaError`."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise SchemaError(
            f"invalid {what} {name!r}: identifiers must match ^[a-zA-Z_][a-zA-Z0-9_]{{0,63}}$"
        )
    return name


class ColumnValue(msgspec.Struct, frozen=True):
    """One column of a delta: its name and new JSON value."""

    column: str
    value: Any


class WireColumn(msgspec.Struct):
    """A column entry as it appears on the wire."""

    column: str
    value: Any = None


class WireDelta(msgspec.Struct, rename="camel"):
    """A RowDelta as it appears in JSON bodies: HLC a decimal string (an integer is tolerated)."""

    op: str
    table: str
    row_id: str
    client_id: str
    columns: list[WireColumn]
    hlc: str | int
    delta_id: str


def delta_id(
    client_id: str, hlc: int | str, table: str, row_id: str, columns: Sequence[Mapping[str, Any]]
) -> str:
    """The SPEC §3 deltaId: sha256 hex of the canonical JSON of the delta's identity and columns."""
    body = {
        "clientId": client_id,
        "columns": [{"column": c["column"], "value": c["value"]} for c in columns],
        "hlc": str(hlc),
        "rowId": row_id,
        "table": table,
    }
    return hashlib.sha256(canonical_json(body).encode("utf-8", "surrogatepass")).hexdigest()


class RowDelta(msgspec.Struct, frozen=True):
    """A change to one row by one client at one HLC; DELETE carries no columns."""

    op: Op
    table: str
    row_id: str
    client_id: str
    columns: tuple[ColumnValue, ...]
    hlc: int
    delta_id: str

    @classmethod
    def create(
        cls,
        op: Op,
        table: str,
        row_id: str,
        client_id: str,
        columns: Mapping[str, Any] | Sequence[ColumnValue],
        hlc: int,
    ) -> RowDelta:
        """Build a validated delta and compute its deltaId."""
        cols = tuple(
            ColumnValue(k, v) for k, v in columns.items()
        ) if isinstance(columns, Mapping) else tuple(columns)
        _check_shape(op, table, row_id, client_id, cols)
        did = delta_id(client_id, hlc, table, row_id, _column_dicts(cols))
        return cls(op, table, row_id, client_id, cols, hlc, did)

    @classmethod
    def from_wire(cls, obj: object) -> RowDelta:
        """Validate a decoded JSON delta and check its deltaId; raises on any problem."""
        try:
            wire = msgspec.convert(obj, WireDelta)
        except msgspec.ValidationError as exc:
            raise ValidationError(f"invalid delta: {exc}") from None
        return cls.from_wire_struct(wire)

    @classmethod
    def from_wire_struct(cls, wire: WireDelta, where: str = "delta") -> RowDelta:
        """Validate a :class:`WireDelta` (already type-checked by msgspec) into a RowDelta."""
        if wire.op not in _OPS:
            raise ValidationError(f"{where}.op must be INSERT, UPDATE or DELETE, got {wire.op!r}")
        ts = _hlc.parse(wire.hlc, f"{where}.hlc")
        cols = tuple(ColumnValue(c.column, c.value) for c in wire.columns)
        op: Op = wire.op  # type: ignore[assignment]
        _check_shape(op, wire.table, wire.row_id, wire.client_id, cols, where)
        expected = delta_id(wire.client_id, ts, wire.table, wire.row_id, _column_dicts(cols))
        if wire.delta_id != expected:
            raise SchemaError(
                f"{where}.deltaId {wire.delta_id!r} does not match its content "
                f"(expected {expected}); recompute it with the canonical JSON of SPEC §3"
            )
        return cls(op, wire.table, wire.row_id, wire.client_id, cols, ts, wire.delta_id)

    def to_wire_struct(self) -> WireDelta:
        """This delta as a :class:`WireDelta` (HLC as a decimal string)."""
        return WireDelta(
            self.op,
            self.table,
            self.row_id,
            self.client_id,
            [WireColumn(c.column, c.value) for c in self.columns],
            str(self.hlc),
            self.delta_id,
        )

    def to_wire(self) -> dict[str, Any]:
        """This delta as a JSON-ready dict with camelCase keys and the HLC as a decimal string."""
        return {
            "op": self.op,
            "table": self.table,
            "rowId": self.row_id,
            "clientId": self.client_id,
            "columns": _column_dicts(self.columns),
            "hlc": str(self.hlc),
            "deltaId": self.delta_id,
        }

    def values(self) -> dict[str, Any]:
        """The delta's columns as a ``{column: value}`` dict."""
        return {c.column: c.value for c in self.columns}


def _column_dicts(cols: Sequence[ColumnValue]) -> list[dict[str, Any]]:
    return [{"column": c.column, "value": c.value} for c in cols]


def validate_row_id(row_id: object, what: str = "rowId") -> str:
    """Return ``row_id`` if it is a valid row key (SPEC §3: non-empty text of at most 1024
    characters, storable everywhere); raise :class:`ValidationError` naming ``what`` otherwise."""
    if not isinstance(row_id, str) or not row_id or len(row_id) > MAX_ROW_ID_LENGTH:
        raise ValidationError(f"{what} must be a non-empty string of at most 1024 chars")
    _check_text(row_id, what)
    return row_id


def _check_text(text: str, where: str) -> None:
    """Keys are stored and sent as text everywhere: no NUL (no SQL text type stores it faithfully)
    and valid Unicode (a lone surrogate has no UTF-8 form: protobuf, SQLite and JSON refuse it)."""
    if "\x00" in text:
        raise ValidationError(f"{where} must not contain NUL characters")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValidationError(f"{where} must be valid Unicode (no lone surrogates)") from None


def _check_shape(
    op: str,
    table: str,
    row_id: str,
    client_id: str,
    cols: Sequence[ColumnValue],
    where: str = "delta",
) -> None:
    if op not in _OPS:
        raise ValidationError(f"{where}.op must be INSERT, UPDATE or DELETE, got {op!r}")
    validate_identifier(table, f"{where}.table")
    validate_row_id(row_id, f"{where}.rowId")
    if not isinstance(client_id, str) or not client_id:
        raise ValidationError(f"{where}.clientId must be a non-empty string")
    _check_text(client_id, f"{where}.clientId")
    if op == "DELETE" and cols:
        raise ValidationError(f"{where}: a DELETE carries no columns")
    seen: set[str] = set()
    for c in cols:
        validate_identifier(c.column, f"{where} column")
        if c.column in seen:
            raise ValidationError(f"{where}: column {c.column!r} appears twice")
        seen.add(c.column)


def _same(a: Any, b: Any) -> bool:
    # Python's == treats True == 1 and 1 == 1.0; JSON values differ by type, so compare canonically.
    return canonical_json(a) == canonical_json(b)


def extract_delta(
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    *,
    table: str,
    row_id: str,
    client_id: str,
    hlc: int,
) -> RowDelta | None:
    """The delta that turns row ``before`` into row ``after`` (None = absent); None if no change.

    A new row gives an INSERT of all its columns, a removed row a DELETE, a changed row an
    UPDATE of exactly the columns whose values differ.
    """
    if after is None:
        if before is None:
            return None
        return RowDelta.create("DELETE", table, row_id, client_id, {}, hlc)
    if before is None:
        return RowDelta.create("INSERT", table, row_id, client_id, after, hlc)
    changed = {
        k: v for k, v in after.items() if k not in before or not _same(before[k], v)
    }
    if not changed:
        return None
    return RowDelta.create("UPDATE", table, row_id, client_id, changed, hlc)
