"""Column types (docs/protocol.md §10): each type's canonical wire encoding, its Python value,
and its type in the lake and in every destination, in one place.

Pure: no I/O. The wire stays LakeSync v1 (JSON values), so every new type is encoded as a JSON
value the original five types already hold (``integer`` a number, or a string beyond ±2^53;
``decimal``, ``timestamp``, ``date`` and ``bytes`` strings). Each has exactly one canonical
encoding: the deltaId is computed by the client over its values, so the gateway refuses a
non-canonical value instead of rewriting it (:func:`check_wire_value`), and every replica that
holds the wire value holds the same text.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import re
from typing import Any, Literal, NamedTuple, Protocol

from lakesync.canonical import canonical_json, js_number_str
from lakesync.errors import SchemaError, ValidationError, ValueTypeError
from lakesync.values import MAX_SAFE_MAGNITUDE, normalize_value


class ColumnLike(Protocol):
    """What this module reads of a column: :class:`lakesync.schema.ColumnSpec` is one. A protocol
    rather than an import of ``lakesync.schema``, which imports this module (no import cycle)."""

    @property
    def name(self) -> str: ...

    @property
    def type(self) -> str: ...

    @property
    def precision(self) -> int | None: ...

    @property
    def scale(self) -> int | None: ...

    @property
    def nullable(self) -> bool: ...

__all__ = [
    "DECIMAL_DEFAULT_PRECISION",
    "DECIMAL_DEFAULT_SCALE",
    "INTEGER_MAX",
    "INTEGER_MIN",
    "MAX_DECIMAL_PRECISION",
    "TYPE_MAPPING",
    "ColumnLike",
    "Dialect",
    "TypeMappingRow",
    "check_spec",
    "check_wire_value",
    "decimal_holding",
    "decimal_params",
    "decode_value",
    "encode_value",
    "expected_form",
    "iceberg_type",
    "spark_type",
    "sql_type",
    "type_text",
    "widening_allowed",
]

Dialect = Literal["postgres", "mysql", "bigquery"]

INTEGER_MIN = -(2**63)
"""The smallest ``integer`` (64-bit signed)."""
INTEGER_MAX = 2**63 - 1
"""The largest ``integer`` (64-bit signed)."""
MAX_DECIMAL_PRECISION = 38
"""The most digits a ``decimal`` holds (Spark's, Iceberg's and BigQuery's NUMERIC limit)."""
DECIMAL_DEFAULT_PRECISION = 38
"""A ``decimal`` column's precision when it declares none."""
DECIMAL_DEFAULT_SCALE = 9
"""A ``decimal`` column's scale when it declares none."""
_MYSQL_MAX_SCALE = 30  # MySQL/MariaDB DECIMAL holds at most 30 fraction digits
_INTEGER_DIGITS = 19  # digits of 2^63: a decimal holding every integer needs p - s >= 19

_INT_TEXT = re.compile(r"-?(?:0|[1-9][0-9]*)")
_DECIMAL_TEXT = re.compile(r"(-?)(0|[1-9][0-9]*)(?:\.([0-9]+))?")
_TIMESTAMP_TEXT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")
_DATE_TEXT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_OPTIONED = ("precision", "scale")  # options only a decimal column may set


def decimal_params(spec: ColumnLike) -> tuple[int, int]:
    """A ``decimal`` column's ``(precision, scale)``, the defaults (38, 9) filled in."""
    precision = DECIMAL_DEFAULT_PRECISION if spec.precision is None else spec.precision
    if spec.scale is not None:
        return precision, spec.scale
    return precision, min(DECIMAL_DEFAULT_SCALE, precision)


def check_spec(spec: ColumnLike) -> None:
    """Raise :class:`SchemaError` if a column's options do not fit its type: precision and
    scale belong to ``decimal`` alone, with 1 ≤ precision ≤ 38 and 0 ≤ scale ≤ precision."""
    if spec.type != "decimal":
        for option in _OPTIONED:
            if getattr(spec, option) is not None:
                raise SchemaError(
                    f"column {spec.name!r} is {spec.type}: only a decimal column takes "
                    f"{option!r}"
                )
        return
    precision, scale = decimal_params(spec)
    if not 1 <= precision <= MAX_DECIMAL_PRECISION:
        raise SchemaError(
            f"column {spec.name!r}: decimal precision must be 1..{MAX_DECIMAL_PRECISION}, "
            f"not {precision}"
        )
    if not 0 <= scale <= precision:
        raise SchemaError(
            f"column {spec.name!r}: decimal scale must be 0..precision ({precision}), not {scale}"
        )


def expected_form(spec: ColumnLike) -> str:
    """A column's type and its canonical wire form, as error messages name them."""
    match spec.type:
        case "integer":
            return (
                "integer: a JSON integer number within ±2^53, beyond it a JSON string of its "
                'decimal digits (e.g. "4611686018427387905"), range -2^63..2^63-1'
            )
        case "decimal":
            p, s = decimal_params(spec)
            example = "3" if s == 0 else "12." + "5".ljust(s, "0")
            return (
                f"decimal({p},{s}): a JSON string in plain notation with exactly {s} fraction "
                f'digits and at most {p - s} integer digits (e.g. "{example}")'
            )
        case "timestamp":
            return 'timestamp: a JSON string "YYYY-MM-DDTHH:MM:SS.ffffffZ" (UTC, 6 fraction digits)'
        case "date":
            return 'date: a JSON string "YYYY-MM-DD"'
        case "bytes":
            return "bytes: a JSON string of standard base64 with padding (RFC 4648 §4)"
        case "number":
            return "number: a JSON number"
        case "string":
            return "string: a JSON string"
        case "boolean":
            return "boolean: true or false"
        case "json":
            return "json: any JSON value"
        case _:
            return "null: only null"


def _refuse(spec: ColumnLike, wire: Any, why: str = "") -> ValueTypeError:
    shown = repr(wire)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    because = f" ({why})" if why else ""
    return ValueTypeError(
        f"column {spec.name!r} is declared {expected_form(spec)}; got {shown}{because}"
    )


def check_wire_value(spec: ColumnLike, wire: Any) -> None:
    """Raise :class:`ValueTypeError` (a :class:`SchemaError` the gateway answers with 400)
    unless ``wire`` is the canonical wire encoding of a value of
    the column's type (null fits every nullable column); the message names the column, its type
    and the canonical form. Never coerces: the gateway cannot rewrite a client's value."""
    if wire is None:
        if not spec.nullable:
            raise ValueTypeError(f"column {spec.name!r} is not nullable: it cannot be null")
        return
    kind = type(wire)
    match spec.type:
        case "string":
            if kind is not str:
                raise _refuse(spec, wire)
            if not wire.isascii():
                try:
                    wire.encode("utf-8")
                except UnicodeEncodeError:
                    raise ValueTypeError(
                        f"column {spec.name!r}: text must be valid Unicode (no lone surrogates)"
                    ) from None
        case "number":
            if kind is not int and kind is not float:
                raise _refuse(spec, wire)
        case "boolean":
            if kind is not bool:
                raise _refuse(spec, wire)
        case "json":
            try:
                normalize_value(wire)
            except ValidationError as exc:
                raise ValueTypeError(
                    f"column {spec.name!r} does not hold a JSON value: {exc}"
                ) from None
            _check_json_text(spec, wire)
        case "null":
            raise _refuse(spec, wire)
        case "integer":
            _check_integer(spec, wire)
        case "decimal":
            if kind is not str:
                raise _refuse(spec, wire)
            _parse_decimal(spec, wire)
        case "timestamp":
            if kind is not str or not _TIMESTAMP_TEXT.fullmatch(wire):
                raise _refuse(spec, wire)
            _parse_timestamp(spec, wire)
        case "date":
            if kind is not str or not _DATE_TEXT.fullmatch(wire):
                raise _refuse(spec, wire)
            _parse_date(spec, wire)
        case "bytes":
            if kind is not str:
                raise _refuse(spec, wire)
            _parse_bytes(spec, wire)


def _check_json_text(spec: ColumnLike, value: Any) -> None:
    # Lone surrogates anywhere in a JSON value cannot be written as UTF-8 by any replica.
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueTypeError(
                    f"column {spec.name!r}: text must be valid Unicode (no lone surrogates)"
                ) from None
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_json_text(spec, k)
            _check_json_text(spec, v)
    elif isinstance(value, list | tuple):
        for v in value:
            _check_json_text(spec, v)


def _check_integer(spec: ColumnLike, wire: Any) -> None:
    kind = type(wire)
    if kind is int:
        if not -MAX_SAFE_MAGNITUDE <= wire <= MAX_SAFE_MAGNITUDE:
            raise _refuse(spec, wire, "beyond ±2^53 an integer is sent as a string of its digits")
        return
    if kind is str and _INT_TEXT.fullmatch(wire) and len(wire) <= 20:
        number = int(wire)
        if -MAX_SAFE_MAGNITUDE <= number <= MAX_SAFE_MAGNITUDE:
            raise _refuse(spec, wire, "within ±2^53 an integer is sent as a JSON number")
        if INTEGER_MIN <= number <= INTEGER_MAX:
            return
        raise _refuse(spec, wire, "out of the 64-bit range")
    raise _refuse(spec, wire)


def _parse_decimal(spec: ColumnLike, wire: str) -> decimal.Decimal:
    p, s = decimal_params(spec)
    match = _DECIMAL_TEXT.fullmatch(wire)
    if match is None:
        raise _refuse(spec, wire)
    sign, whole, fraction = match.groups()
    if len(fraction or "") != s:
        raise _refuse(spec, wire, f"exactly {s} fraction digits")
    if whole != "0" and len(whole) > p - s:
        raise _refuse(spec, wire, f"at most {p - s} integer digits")
    if sign and whole == "0" and not (fraction or "").strip("0"):
        raise _refuse(spec, wire, "zero is written without a sign")
    return decimal.Decimal(wire)


def _parse_timestamp(spec: ColumnLike, wire: str) -> dt.datetime:
    # The pattern was matched before: fromisoformat only checks the calendar (and is fast).
    try:
        value = dt.datetime.fromisoformat(wire[:-1])
    except ValueError:
        raise _refuse(spec, wire, "not a valid date and time") from None
    return value.replace(tzinfo=dt.UTC)


def _parse_date(spec: ColumnLike, wire: str) -> dt.date:
    try:
        return dt.date.fromisoformat(wire)
    except ValueError:
        raise _refuse(spec, wire, "not a valid date") from None


def _parse_bytes(spec: ColumnLike, wire: str) -> bytes:
    try:
        raw = base64.b64decode(wire, validate=True)
    except (binascii.Error, ValueError):
        raise _refuse(spec, wire, "not base64") from None
    if base64.b64encode(raw).decode("ascii") != wire:
        raise _refuse(spec, wire, "not canonical base64: unused bits must be zero")
    return raw


def _format_timestamp(value: dt.datetime) -> str:
    # Not strftime: its %Y drops the leading zeros of years before 1000 on glibc.
    return value.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def encode_value(spec: ColumnLike, value: Any) -> Any:
    """A Python value as its column's canonical wire JSON value.

    Accepts ``int`` for integer; ``decimal.Decimal`` or ``int`` for decimal (a value needing
    rounding to the column's scale is refused, never rounded); an aware ``datetime`` in any zone
    for timestamp (normalised to UTC; a naive one is refused: it names no instant); a
    ``datetime.date`` for date; ``bytes``/``bytearray``/``memoryview`` for bytes; and the JSON
    values of the original types as they are. Raises :class:`ValueTypeError` naming the column and
    the expected type."""
    if value is None:
        check_wire_value(spec, None)
        return None
    match spec.type:
        case "integer":
            if type(value) is bool or not isinstance(value, int):
                raise _refuse(spec, value, "write a Python int")
            number = int(value)
            if not INTEGER_MIN <= number <= INTEGER_MAX:
                raise _refuse(spec, value, "out of the 64-bit range")
            return number if -MAX_SAFE_MAGNITUDE <= number <= MAX_SAFE_MAGNITUDE else str(number)
        case "decimal":
            return _encode_decimal(spec, value)
        case "timestamp":
            if not isinstance(value, dt.datetime):
                raise _refuse(spec, value, "write an aware datetime")
            if value.tzinfo is None or value.utcoffset() is None:
                raise _refuse(
                    spec,
                    value,
                    "a naive datetime names no instant: give it a zone, e.g. tzinfo=timezone.utc",
                )
            try:
                utc = value.astimezone(dt.UTC)
            except OverflowError:
                raise _refuse(spec, value, "out of range in UTC") from None
            return _format_timestamp(utc)
        case "date":
            if isinstance(value, dt.datetime) or not isinstance(value, dt.date):
                raise _refuse(spec, value, "write a datetime.date")
            return value.isoformat()
        case "bytes":
            if not isinstance(value, bytes | bytearray | memoryview):
                raise _refuse(spec, value, "write bytes")
            return base64.b64encode(bytes(value)).decode("ascii")
        case _:
            check_wire_value(spec, value)
            return value


def _encode_decimal(spec: ColumnLike, value: Any) -> str:
    if type(value) is bool or not isinstance(value, decimal.Decimal | int):
        raise _refuse(spec, value, "write a decimal.Decimal or an int")
    p, s = decimal_params(spec)
    number = decimal.Decimal(value)
    if not number.is_finite():
        raise _refuse(spec, value, "not a finite number")
    if number != 0 and number.adjusted() >= p - s:
        raise _refuse(spec, value, f"more than {p - s} integer digits")
    # Exact or refused: a value needing rounding to the scale is not silently changed.
    context = decimal.Context(prec=MAX_DECIMAL_PRECISION + 1, traps=[decimal.Inexact])
    try:
        quantized = number.quantize(decimal.Decimal(1).scaleb(-s), context=context)
    except (decimal.Inexact, decimal.InvalidOperation):
        raise _refuse(spec, value, f"needs rounding to {s} fraction digits") from None
    if quantized == 0:
        quantized = abs(quantized)  # "-0.00" is written "0.00"
    return format(quantized, "f")


def decode_value(spec: ColumnLike, wire: Any) -> Any:
    """A wire value as its Python value: integer → ``int``, decimal → ``decimal.Decimal``
    (quantized to the scale), timestamp → aware ``datetime`` in UTC, date → ``datetime.date``,
    bytes → ``bytes``; the original types as they are. Raises :class:`ValueTypeError` for a
    value that is not of the column's type.

    Values written before a column was widened keep their wire form (their deltaIds cover it),
    so the narrower forms read as the wider type too: an integer in a decimal or number column,
    a decimal of a smaller scale, and any value in a string column (as JavaScript's ``String``
    writes it; a json value as its canonical JSON text)."""
    if wire is None:
        return None
    kind = type(wire)
    match spec.type:
        case "integer":
            if kind is int:
                return wire
            if kind is str and _INT_TEXT.fullmatch(wire):
                return int(wire)
            raise _refuse(spec, wire)
        case "decimal":
            return _widened_decimal(spec, wire)
        case "number":
            if kind is str and _DECIMAL_TEXT.fullmatch(wire):  # a widened integer or decimal
                return normalize_value(float(wire))
            return wire
        case "string":
            return wire if kind is str else _as_text(wire)
        case "timestamp":
            if kind is not str or not _TIMESTAMP_TEXT.fullmatch(wire):
                raise _refuse(spec, wire)
            return _parse_timestamp(spec, wire)
        case "date":
            if kind is not str or not _DATE_TEXT.fullmatch(wire):
                raise _refuse(spec, wire)
            return _parse_date(spec, wire)
        case "bytes":
            if kind is not str:
                raise _refuse(spec, wire)
            return _parse_bytes(spec, wire)
        case _:
            return wire


def _widened_decimal(spec: ColumnLike, wire: Any) -> decimal.Decimal:
    if type(wire) is int:
        return _encode_and_parse(spec, wire)
    if type(wire) is not str or _DECIMAL_TEXT.fullmatch(wire) is None:
        raise _refuse(spec, wire)
    try:
        return _parse_decimal(spec, wire)  # canonical: the common case, and the fast one
    except ValueTypeError:
        return _encode_and_parse(spec, decimal.Decimal(wire))


def _encode_and_parse(spec: ColumnLike, value: int | decimal.Decimal) -> decimal.Decimal:
    return decimal.Decimal(_encode_decimal(spec, value))


def _as_text(wire: Any) -> str:
    if wire is True or wire is False:
        return "true" if wire else "false"
    if type(wire) is int or type(wire) is float:
        return js_number_str(wire)
    return canonical_json(wire)


def spark_type(spec: ColumnLike) -> str:
    """The column's Spark SQL type in the lake (``analytics.<table>``)."""
    if spec.type == "decimal":
        p, s = decimal_params(spec)
        return f"decimal({p},{s})"
    return _SPARK[spec.type]


_SPARK = {
    "integer": "bigint",
    "timestamp": "timestamp",
    "date": "date",
    "bytes": "binary",
    "number": "double",
    "string": "string",
    "boolean": "boolean",
    "json": "string",
    "null": "string",
}


def iceberg_type(spec: ColumnLike) -> str:
    """The column's Iceberg type, in the Iceberg spec's notation (``"long"``,
    ``"decimal(38, 9)"``, ``"timestamptz"``, ``"date"``, ``"binary"``, ...), which pyiceberg
    takes wherever it takes a type (``NestedField(1, "id", iceberg_type(spec))``): the core
    imports no lake library. Spark's ``timestamp`` is Iceberg's ``timestamptz``, an instant."""
    if spec.type == "decimal":
        return "decimal({}, {})".format(*decimal_params(spec))
    return _ICEBERG[spec.type]


_ICEBERG = {
    "integer": "long", "timestamp": "timestamptz", "date": "date", "bytes": "binary",
    "number": "double", "string": "string", "boolean": "boolean", "json": "string",
    "null": "string",
}


def sql_type(spec: ColumnLike, dialect: Dialect) -> str:
    """The column's type in a destination database of ``dialect``.

    MySQL/MariaDB's DECIMAL holds at most 30 fraction digits: a decimal of a larger scale is a
    ``VARCHAR`` holding its canonical text. BigQuery's NUMERIC holds 29 integer and 9 fraction
    digits: a larger decimal is a BIGNUMERIC."""
    if spec.type == "decimal":
        p, s = decimal_params(spec)
        if dialect == "mysql" and s > _MYSQL_MAX_SCALE:
            return f"VARCHAR({p + 2})"  # sign and point
        if dialect == "bigquery" and (p - s > 29 or s > 9):
            return f"BIGNUMERIC({p},{s})"
        return f"NUMERIC({p},{s})" if dialect != "mysql" else f"DECIMAL({p},{s})"
    return _SQL[dialect][spec.type]


_SQL: dict[str, dict[str, str]] = {
    "postgres": {
        "integer": "BIGINT",
        "timestamp": "TIMESTAMPTZ",
        "date": "DATE",
        "bytes": "BYTEA",
        "number": "DOUBLE PRECISION",
        "string": "TEXT",
        "boolean": "BOOLEAN",
        "json": "JSONB",
        "null": "TEXT",
    },
    "mysql": {
        "integer": "BIGINT",
        "timestamp": "DATETIME(6)",
        "date": "DATE",
        "bytes": "LONGBLOB",
        "number": "DOUBLE",
        "string": "LONGTEXT",
        "boolean": "TINYINT(1)",
        "json": "JSON",
        "null": "LONGTEXT",
    },
    "bigquery": {
        "integer": "INT64",
        "timestamp": "TIMESTAMP",
        "date": "DATE",
        "bytes": "BYTES",
        "number": "FLOAT64",
        "string": "STRING",
        "boolean": "BOOL",
        "json": "JSON",
        "null": "STRING",
    },
}


class TypeMappingRow(NamedTuple):
    """One column type's forms everywhere (a row of the docs' mapping table)."""

    type: str
    wire: str
    ts_reads: str
    python: str
    spark_iceberg: str
    postgres: str
    mysql: str
    bigquery: str


TYPE_MAPPING: tuple[TypeMappingRow, ...] = (
    TypeMappingRow(
        "integer",
        'number within ±2^53, else string of digits (`"4611686018427387905"`)',
        "number (string beyond ±2^53)",
        "`int`",
        "bigint / long",
        "BIGINT",
        "BIGINT",
        "INT64",
    ),
    TypeMappingRow(
        "decimal(p,s)",
        'string, plain, exactly s fraction digits (`"12.50"`)',
        "string",
        "`decimal.Decimal`",
        "decimal(p,s)",
        "NUMERIC(p,s)",
        "DECIMAL(p,s) (VARCHAR of the text when s > 30)",
        "NUMERIC(p,s); BIGNUMERIC(p,s) when p-s > 29 or s > 9",
    ),
    TypeMappingRow(
        "timestamp",
        "string `YYYY-MM-DDTHH:MM:SS.ffffffZ` (UTC)",
        "string",
        "aware `datetime` (UTC)",
        "timestamp / timestamptz",
        "TIMESTAMPTZ",
        "DATETIME(6) (UTC)",
        "TIMESTAMP",
    ),
    TypeMappingRow(
        "date",
        "string `YYYY-MM-DD`",
        "string",
        "`datetime.date`",
        "date",
        "DATE",
        "DATE",
        "DATE",
    ),
    TypeMappingRow(
        "bytes",
        "string, standard base64 with padding",
        "string",
        "`bytes`",
        "binary",
        "BYTEA",
        "LONGBLOB",
        "BYTES",
    ),
    TypeMappingRow(
        "number",
        "number",
        "number",
        "`float` (`int` when integral)",
        "double",
        "DOUBLE PRECISION",
        "DOUBLE",
        "FLOAT64",
    ),
    TypeMappingRow(
        "string",
        "string",
        "string",
        "`str`",
        "string",
        "TEXT",
        "LONGTEXT",
        "STRING",
    ),
    TypeMappingRow(
        "boolean",
        "true / false",
        "boolean",
        "`bool`",
        "boolean",
        "BOOLEAN",
        "TINYINT(1)",
        "BOOL",
    ),
    TypeMappingRow(
        "json",
        "any JSON value",
        "the parsed value",
        "the parsed value",
        "string (JSON text)",
        "JSONB",
        "JSON",
        "JSON",
    ),
    TypeMappingRow(
        "null",
        "null",
        "null",
        "`None`",
        "string",
        "TEXT",
        "LONGTEXT",
        "STRING",
    ),
)
"""Every column type's wire encoding, what the TypeScript client reads it as, its Python value,
and its type in the lake and each destination: the docs' mapping table is generated from it."""


_WIDER = {("integer", "decimal"), ("integer", "number"), ("decimal", "number")}


def widening_allowed(old: ColumnLike, new: ColumnLike) -> str | None:
    """None if a column may change from ``old`` to ``new`` in place (the same type, or a
    widening: integer → decimal → number, decimal(p,s) → decimal(p',s') with p'-s' ≥ p-s and
    s' ≥ s, any type → string, not nullable → nullable); else why not and what to do."""
    what = f"column {old.name!r} cannot change type from {type_text(old)} to {type_text(new)}"
    if old.nullable and not new.nullable:
        return f"{what}: rows may hold null already; a column cannot become not nullable"
    if old.type == new.type and old.type != "decimal":
        return None
    if new.type == "string" and old.type != "null":
        return None
    if old.type == "decimal" and new.type == "decimal":
        (p, s), (p2, s2) = decimal_params(old), decimal_params(new)
        if p2 - s2 >= p - s and s2 >= s:
            return None
        return (
            f"{what}: a decimal may only widen (as many integer digits, {p - s}, and as many "
            f"fraction digits, {s}, or more); add a new column instead"
        )
    if old.type == "integer" and new.type == "decimal":
        p, s = decimal_params(new)
        if p - s >= _INTEGER_DIGITS:
            return None
        return (
            f"{what}: a decimal holding every 64-bit integer needs precision - scale ≥ "
            f"{_INTEGER_DIGITS}; declare a wider decimal"
        )
    if (old.type, new.type) in _WIDER:
        return None
    return (
        f"{what}: only widening is allowed (integer → decimal → number, a wider decimal, "
        "any type → string, not nullable → nullable); add a new column of the new type instead, "
        "or, for a number column registered before typed columns existed, run "
        "`lakesync schema migrate`"
    )


def decimal_holding(old: ColumnLike, new: ColumnLike) -> tuple[int, int] | None:
    """The narrowest decimal ``(precision, scale)`` that is a widening of ``old`` and holds
    every value of ``new``, both integer or decimal columns: as many integer digits as the
    wider of the two (19 for an integer) and as many fraction digits. None when that takes
    more than 38 digits, or when either column is of another type. A source's integer column
    altered to ``numeric(20,2)`` thus becomes ``decimal(21,2)``, not text."""
    if old.type not in ("integer", "decimal") or new.type not in ("integer", "decimal"):
        return None
    (p, s), (p2, s2) = (
        (_INTEGER_DIGITS, 0) if c.type == "integer" else decimal_params(c) for c in (old, new)
    )
    scale = max(s, s2)
    precision = max(p - s, p2 - s2) + scale
    return (precision, scale) if precision <= MAX_DECIMAL_PRECISION else None


def type_text(spec: ColumnLike) -> str:
    """A column's type as messages name it: ``integer``, ``decimal(38,9)``, ``date not
    nullable``."""
    if spec.type == "decimal":
        p, s = decimal_params(spec)
        text = f"decimal({p},{s})"
    else:
        text = spec.type
    return text if spec.nullable else f"{text} not nullable"
