"""Row deltas (docs/protocol.md §3): the unit of change, its deltaId, and extraction from row
pairs."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, NamedTuple, Protocol, get_args

import msgspec

from lakesync import hlc as _hlc
from lakesync.canonical import canonical_json
from lakesync.errors import LakeSyncError, SchemaError, ValidationError
from lakesync.values import normalize_value

__all__ = [
    "MAX_ROW_ID_LENGTH",
    "RESERVED_CLIENT_PREFIX",
    "VIEW_ENTRY_CLIENT",
    "VIEW_EVICTION_CLIENT",
    "CellError",
    "CellErrorHandler",
    "ColumnValue",
    "Op",
    "RowDelta",
    "WireCell",
    "WireDelta",
    "delta_id",
    "extract_delta",
    "is_reserved_client",
    "is_view_eviction",
    "read_delta",
    "read_trusted_json_delta",
    "validate_gateway_id",
    "validate_identifier",
    "validate_row_id",
]

Op = Literal["INSERT", "UPDATE", "DELETE"]
_OPS: dict[str, Op] = {op: op for op in get_args(Op)}
_IDENTIFIER = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]{0,63}")
# Column names a trusted read has checked: a page repeats a few names thousands of times, and a
# set look-up costs a fraction of the match. Bounded: a hostile peer cannot grow it for ever.
_CHECKED_COLUMNS: set[str] = set()
_CHECKED_MAX = 4096
MAX_ROW_ID_LENGTH = 1024

RESERVED_CLIENT_PREFIX = "lakesync-gateway"
"""Client ids starting with this belong to gateways; no token may carry one."""

VIEW_EVICTION_CLIENT = "lakesync-gateway-0"
"""The client id of a *view eviction*: a DELETE a gateway sends when a row leaves (or is about
to be re-sent into) a client's view under sync rules. Its clock sorts above every real write of
the row, so a plain v1 client that applies it as a DELETE removes the row; a client that keeps
per-cell clocks (ours) instead forgets everything it held for the row, so the row's real clocks,
sent after it, rebuild it exactly (see ``lakesync.views``)."""

VIEW_ENTRY_CLIENT = "lakesync-gateway-1"
"""The client id of a *view entry*: the INSERT of a row's whole visible state that a gateway
sends, right after a view eviction at the same HLC, to a client that knows no view evictions
and applies deltas with whole-row last-writer-wins (the TypeScript one). It sorts above
:data:`VIEW_EVICTION_CLIENT`, so it wins the tie with the eviction (see ``lakesync.views``)."""


def validate_identifier(
    name: object, what: str, error: type[LakeSyncError] = SchemaError
) -> str:
    """Return ``name`` if it is a valid identifier (a table, column or gateway id), else raise
    ``error`` (:class:`SchemaError` by default)."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise error(
            f"invalid {what} {repr(name)[:80]}: identifiers must match "
            "^[a-zA-Z_][a-zA-Z0-9_]{0,63}$"
        )
    return name


def validate_gateway_id(gateway_id: object) -> str:
    """Return ``gateway_id`` if it is a valid gateway id, else raise :class:`ValidationError`.

    Gateway ids follow the identifier rule, so every place one ends up (the landing table's
    partition directory, metric labels, log lines) gets a short, plain name.
    """
    return validate_identifier(gateway_id, "gateway id", ValidationError)


class ColumnValue(msgspec.Struct, frozen=True, gc=False):
    """One column of a delta: its name and new JSON value (on the wire, a missing value is null)."""

    column: str
    value: Any = None


class WireDelta(msgspec.Struct, rename="camel"):
    """A RowDelta as it appears in JSON bodies: HLC a decimal string (an integer is tolerated).
    msgspec checks the op while decoding; an unknown one names its JSON path."""

    op: Op
    table: str
    row_id: str
    client_id: str
    columns: tuple[ColumnValue, ...]
    hlc: str | int
    delta_id: str


def delta_id(
    client_id: str, hlc: int | str, table: str, row_id: str, columns: Sequence[Mapping[str, Any]]
) -> str:
    """The deltaId (docs/protocol.md §3): sha256 hex of the canonical JSON of the delta's
    identity and columns."""
    cols = tuple(ColumnValue(c["column"], c["value"]) for c in columns)
    return _identity_id(client_id, hlc, table, row_id, cols)


class _Identity(msgspec.Struct, rename="camel", gc=False):
    """What a deltaId hashes, its fields in canonical (sorted) key order; each column encodes as
    ``{"column", "value"}``, sorted too."""

    client_id: str
    columns: tuple[ColumnValue, ...]
    hlc: str
    row_id: str
    table: str


_identity_encoder = msgspec.json.Encoder()
_MAX_SAFE_INT = 2**53


def _all_plain(cols: Sequence[ColumnValue]) -> bool:
    """Whether msgspec writes every value of ``cols`` exactly as canonical JSON does: a string
    (msgspec escapes what ``JSON.stringify`` escapes; a lone surrogate makes it raise), a
    boolean, null or a safe integer. Floats (JavaScript's number format), objects (sorted keys)
    and unsafe integers take the text path."""
    for c in cols:
        value = c.value
        kind = type(value)
        if not (
            kind is str
            or value is None
            or kind is bool
            or (kind is int and -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT)
        ):
            return False
    return True


def _identity_id(
    client_id: str, hlc: int | str, table: str, row_id: str, cols: Sequence[ColumnValue]
) -> str:
    # This runs on every pushed delta: most cells are plain, and then msgspec writes the
    # canonical JSON of {clientId, columns: [{column, value}], hlc, rowId, table} in one call.
    if _all_plain(cols):
        try:
            text = _identity_encoder.encode(
                _Identity(client_id, tuple(cols), str(hlc), row_id, table)
            )
        except UnicodeEncodeError:  # a lone surrogate: JSON.stringify escapes it
            pass
        else:
            return hashlib.sha256(text).hexdigest()
    return hashlib.sha256(_identity_text(client_id, hlc, table, row_id, cols)).hexdigest()


def _identity_text(
    client_id: str, hlc: int | str, table: str, row_id: str, cols: Sequence[ColumnValue]
) -> bytes:
    """The canonical JSON of a delta's identity written piece by piece (any value)."""
    js = canonical_json
    text = "".join(
        (
            '{"clientId":',
            js(client_id),
            ',"columns":[',
            ",".join(f'{{"column":{js(c.column)},"value":{js(c.value)}}}' for c in cols),
            '],"hlc":',
            js(str(hlc)),
            ',"rowId":',
            js(row_id),
            ',"table":',
            js(table),
            "}",
        )
    )
    return text.encode("utf-8", "surrogatepass")


class RowDelta(msgspec.Struct, frozen=True, gc=False):
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
        cols = _read_cells(cols, table, row_id, "", normalize_value, False, None, "delta")
        did = _identity_id(client_id, hlc, table, row_id, cols)
        return cls(op, table, row_id, client_id, cols, hlc, did)

    @classmethod
    def of_stored(
        cls, op: Op, table: str, row_id: str, client_id: str, columns: Mapping[str, Any], hlc: int
    ) -> RowDelta:
        """A delta of what the gateway already holds (a row's merged cells, a view eviction or
        entry): its names and values were checked when they were ingested, so only the deltaId
        is computed (serving builds one per row served)."""
        cols = tuple(ColumnValue(k, v) for k, v in columns.items())
        did = _identity_id(client_id, hlc, table, row_id, cols)
        return cls(op, table, row_id, client_id, cols, hlc, did)

    def values(self) -> dict[str, Any]:
        """The delta's columns as a ``{column: value}`` dict."""
        return {c.column: c.value for c in self.columns}


def is_reserved_client(client_id: str) -> bool:
    """Whether ``client_id`` is reserved for gateways (see :data:`RESERVED_CLIENT_PREFIX`)."""
    return client_id.startswith(RESERVED_CLIENT_PREFIX)


def is_view_eviction(delta: RowDelta) -> bool:
    """Whether ``delta`` is a gateway's view eviction (see :data:`VIEW_EVICTION_CLIENT`)."""
    return delta.op == "DELETE" and delta.client_id == VIEW_EVICTION_CLIENT


class CellError(NamedTuple):
    """A value a trusted read could not hold, which reads null instead."""

    table: str
    row_id: str
    column: str
    delta_id: str
    reason: str


CellErrorHandler = Callable[[CellError], None]
"""Receives each :class:`CellError` of a trusted read."""

# What reading one cell can raise: the value rule, malformed or out-of-range JSON, deep nesting.
_CELL_ERRORS = (ValidationError, msgspec.DecodeError, RecursionError)


def _reason(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "the value is nested too deeply to decode"
    if isinstance(exc, ValidationError):
        return exc.message
    return f"the value is not valid UTF-8 JSON ({exc})"


class WireCell(Protocol):
    """A column as a wire message carries it: a :class:`ColumnValue` of decoded JSON, or a
    protobuf ``ColumnDelta`` / raw JSON cell whose value is still UTF-8 JSON bytes."""

    @property
    def column(self) -> str: ...

    @property
    def value(self) -> Any: ...


def _read_cells(
    cols: Sequence[WireCell],
    table: str,
    row_id: str,
    did: str,
    cell: Callable[[Any], Any] | None,
    trusted: bool,
    report: CellErrorHandler | None,
    where: str,
) -> tuple[ColumnValue, ...]:
    """The columns with their values as every replica holds them (:mod:`lakesync.values`).

    A normalised value has the same canonical JSON, so a deltaId computed before or after
    normalising is the same. A value no replica can hold is a :class:`ValidationError` naming
    the column and the row, or, ``trusted``, reads null and goes to ``report``. Trusted, each
    column's identifier is checked here (verified, :func:`_check_shape` did it first).
    """
    out: list[ColumnValue] = []
    match = _IDENTIFIER.fullmatch
    checked = _CHECKED_COLUMNS
    for c in cols:
        raw = c.value
        if trusted and c.column not in checked:
            if not match(c.column):
                validate_identifier(c.column, f"{where} column")
            if len(checked) < _CHECKED_MAX:
                checked.add(c.column)
        if cell is None:
            out.append(c if type(c) is ColumnValue else ColumnValue(c.column, raw))
            continue
        try:
            value = cell(raw)
        except _CELL_ERRORS as exc:
            if not trusted:
                if isinstance(exc, RecursionError):
                    raise
                raise ValidationError(
                    f"{where} ({table} row {row_id!r}) column {c.column!r}: {_reason(exc)}"
                ) from None
            value = None
            if report is not None:
                report(CellError(table, row_id, c.column, did, _reason(exc)))
        # A ColumnValue whose value is unchanged is kept; anything else becomes one.
        out.append(c if value is raw and type(c) is ColumnValue else ColumnValue(c.column, value))
    return tuple(out)


def read_delta(
    op: str,
    table: str,
    row_id: str,
    client_id: str,
    columns: Sequence[WireCell],
    hlc: str | int,
    did: str,
    *,
    trusted: bool,
    cell: Callable[[Any], Any] | None = normalize_value,
    report: CellErrorHandler | None = None,
    where: str = "delta",
) -> RowDelta:
    """Read one delta off the wire (JSON or protobuf), verified or trusted.

    Both modes check what keeps a replica safe: the op, the identifiers (they become SQL
    identifiers), the row and client ids, the HLC. ``cell`` turns each column's wire form into
    the value every replica holds (:func:`~lakesync.values.normalize_value` for decoded JSON, a
    JSON decode first for UTF-8 JSON bytes; None keeps the values, for a trusted read of a delta
    this process built, normalised then).

    **Verified** (a gateway reading pushes): a value no replica can hold is a
    :class:`ValidationError` naming the column and row, raised before the deltaId is recomputed
    (canonical JSON must never see it); a deltaId that does not match is a :class:`SchemaError`.

    **Trusted** (a client reading its gateway's replies, or its own outbox): the deltaId is not
    recomputed (the gateway verified it on ingest, and recomputing costs more than half of a
    client's initial sync); a value no replica can hold reads null and goes to ``report`` as a
    :class:`CellError`, so one bad cell never stops syncing. ``where`` names the delta in
    errors (``deltas[3]``).
    """
    checked = _check_shape(op, table, row_id, client_id, columns, where, trusted)
    ts = _hlc.parse(hlc, "delta.hlc" if where == "delta" else f"{where}.hlc")
    cols = _read_cells(columns, table, row_id, did, cell, trusted, report, where)
    if not trusted:
        expected = _identity_id(client_id, ts, table, row_id, cols)
        if did != expected:
            raise SchemaError(
                f"{where}.deltaId {did!r} does not match its content "
                f"(expected {expected}); recompute it with the canonical JSON of "
                "docs/protocol.md §3"
            )
    return RowDelta(checked, table, row_id, client_id, cols, ts, did)


_json_value = msgspec.json.Decoder()


def read_trusted_json_delta(
    op: str,
    table: str,
    row_id: str,
    client_id: str,
    columns: Iterable[WireCell],
    hlc: int,
    did: str,
) -> RowDelta | None:
    """The common case of a trusted :func:`read_delta` of cells sent as UTF-8 JSON (a protobuf
    delta from the gateway), read inline; None for any other delta, which the caller then reads
    with :func:`read_delta` (it checks, reports or raises as usual).

    The common case: a known op, non-empty ids, an integer HLC in range, names that are
    identifiers (checked once, then cached) and cells that are valid JSON values a replica can
    hold. The result equals :func:`read_delta`'s. A checkpoint repeats this millions of times:
    the general path's calls per cell cost a first sync more than its protobuf parsing.
    """
    checked = _CHECKED_COLUMNS
    checked_op = _OPS.get(op)
    if checked_op is None or not row_id or not client_id or not 0 <= hlc <= _hlc.MAX_HLC:
        return None
    if table not in checked:
        if not _IDENTIFIER.fullmatch(table) or len(checked) >= _CHECKED_MAX:
            return None
        checked.add(table)
    cols: list[ColumnValue] = []
    try:
        for c in columns:
            name, raw = c.column, c.value
            if name not in checked:
                return None  # the general path checks it (and caches it)
            value = _json_value.decode(raw) if raw else None
            kind = type(value)
            if not (kind is str or value is None or kind is bool):
                value = normalize_value(value)
            cols.append(ColumnValue(name, value))
    except _CELL_ERRORS:
        return None
    return RowDelta(checked_op, table, row_id, client_id, tuple(cols), hlc, did)


def validate_row_id(row_id: object, what: str = "rowId") -> str:
    """Return ``row_id`` if it is a valid row key (docs/protocol.md §3: non-empty text of at most
    1024 characters, storable everywhere); raise :class:`ValidationError` naming ``what``
    otherwise."""
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
    cols: Sequence[WireCell],
    where: str = "delta",
    trusted: bool = False,
) -> Op:
    # The op, identifiers, ids and columns of docs/protocol.md §3; returns the op, typed. Trusted,
    # only what keeps a replica safe: the op, identifiers (they become SQL identifiers), non-empty
    # ids.
    # This runs on every delta read or built, so the common case is plain checks: the helpers
    # that name the field in their error run only when a check fails.
    checked = _OPS.get(op)
    if checked is None:
        raise ValidationError(f"{where}.op must be INSERT, UPDATE or DELETE, got {op!r}")
    match = _IDENTIFIER.fullmatch
    if type(table) is not str or not match(table):
        validate_identifier(table, f"{where}.table")
    if trusted:  # the columns' identifiers are checked as their cells are read
        if not row_id or not client_id:
            raise ValidationError(f"{where}: rowId and clientId must be non-empty")
        return checked
    if (
        type(row_id) is not str
        or not row_id
        or len(row_id) > MAX_ROW_ID_LENGTH
        or "\x00" in row_id
        or not row_id.isascii()
    ):
        validate_row_id(row_id, f"{where}.rowId")
    cid = client_id
    if type(cid) is not str or not cid or "\x00" in cid or not cid.isascii():
        if not isinstance(cid, str) or not cid:
            raise ValidationError(f"{where}.clientId must be a non-empty string")
        _check_text(cid, f"{where}.clientId")
    if not cols:
        return checked
    if op == "DELETE":
        raise ValidationError(f"{where}: a DELETE carries no columns")
    for c in cols:
        if type(c.column) is not str or not match(c.column):
            validate_identifier(c.column, f"{where} column")
    if len(cols) > 1 and len({c.column for c in cols}) != len(cols):
        seen: set[str] = set()
        for c in cols:
            if c.column in seen:
                raise ValidationError(f"{where}: column {c.column!r} appears twice")
            seen.add(c.column)
    return checked


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
