"""Column types (lakesync.column_types): canonical wire encodings, Python values, the type
mapping everywhere, and widening."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync.canonical import canonical_json
from lakesync.column_types import (
    INTEGER_MAX,
    INTEGER_MIN,
    TYPE_MAPPING,
    check_wire_value,
    decimal_holding,
    decode_value,
    encode_value,
    iceberg_type,
    spark_type,
    sql_type,
    widening_allowed,
)
from lakesync.errors import SchemaError
from lakesync.schema import ColumnSpec

INTEGER = ColumnSpec("id", "integer")
DEC = ColumnSpec("amount", "decimal", precision=10, scale=2)
DEC0 = ColumnSpec("whole", "decimal", precision=5, scale=0)
DEC_DEFAULT = ColumnSpec("d", "decimal")
DEC_ALL_FRACTION = ColumnSpec("f", "decimal", precision=2, scale=2)
TS = ColumnSpec("at", "timestamp")
DATE = ColumnSpec("day", "date")
BYTES = ColumnSpec("blob", "bytes")
UTC = dt.UTC


@pytest.mark.parametrize(
    ("spec", "value", "wire"),
    [
        (INTEGER, 0, 0),
        (INTEGER, 2**53, 2**53),
        (INTEGER, -(2**53), -(2**53)),
        (INTEGER, 2**53 + 1, "9007199254740993"),
        (INTEGER, 2**62 + 1, "4611686018427387905"),
        (INTEGER, INTEGER_MIN, "-9223372036854775808"),
        (INTEGER, INTEGER_MAX, "9223372036854775807"),
        (DEC, decimal.Decimal("12.5"), "12.50"),
        (DEC, 3, "3.00"),
        (DEC, decimal.Decimal("-0.00"), "0.00"),
        (DEC, decimal.Decimal("-0.5"), "-0.50"),
        (DEC, decimal.Decimal("1E+2"), "100.00"),
        (DEC, decimal.Decimal("99999999.99"), "99999999.99"),
        (DEC0, decimal.Decimal("3"), "3"),
        (DEC0, decimal.Decimal("3.000"), "3"),
        (DEC_ALL_FRACTION, decimal.Decimal("0.5"), "0.50"),
        (
            DEC_DEFAULT,
            decimal.Decimal("12345678901234567890123456789.123456789"),
            "12345678901234567890123456789.123456789",
        ),
        (TS, dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC), "2024-01-02T03:04:05.000006Z"),
        (
            TS,
            dt.datetime(2024, 1, 2, 1, 0, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
            "2024-01-02T06:00:00.000000Z",
        ),
        (TS, dt.datetime(1, 1, 1, tzinfo=UTC), "0001-01-01T00:00:00.000000Z"),
        (DATE, dt.date(1969, 7, 20), "1969-07-20"),
        (DATE, dt.date(1, 1, 1), "0001-01-01"),
        (BYTES, b"\x00\xff", "AP8="),
        (BYTES, b"", ""),
        (BYTES, bytearray(b"ab"), "YWI="),
    ],
)
def test_encode_is_canonical_and_decodes_back(spec: ColumnSpec, value: Any, wire: Any) -> None:
    assert encode_value(spec, value) == wire
    check_wire_value(spec, wire)
    decoded = decode_value(spec, wire)
    assert decoded == value
    assert (
        type(decoded)
        is {
            "integer": int,
            "decimal": decimal.Decimal,
            "timestamp": dt.datetime,
            "date": dt.date,
            "bytes": bytes,
        }[spec.type]
    )


def test_decoded_values_have_the_scale_and_utc() -> None:
    assert str(decode_value(DEC, "3.00")) == "3.00"
    assert decode_value(TS, "2024-01-02T06:00:00.000000Z").tzinfo is UTC


@pytest.mark.parametrize(
    ("spec", "wire", "needle"),
    [
        (INTEGER, "5", "within ±2\\^53 an integer is sent as a JSON number"),
        (INTEGER, 2**53 + 1, "beyond ±2\\^53"),
        (INTEGER, 1.5, "integer"),
        (INTEGER, True, "integer"),
        (INTEGER, "9223372036854775808", "64-bit"),
        (INTEGER, "09007199254740993", "integer"),
        (INTEGER, "+9007199254740993", "integer"),
        (DEC, "12.5", "exactly 2 fraction digits"),
        (DEC, "12.500", "exactly 2 fraction digits"),
        (DEC, 12.5, "decimal"),
        (DEC, "1e2", "decimal"),
        (DEC, "+1.00", "decimal"),
        (DEC, "01.00", "decimal"),
        (DEC, "-0.00", "zero is written without a sign"),
        (DEC, "123456789.00", "at most 8 integer digits"),
        (DEC, ".50", "decimal"),
        (DEC0, "3.", "decimal"),
        (DEC0, "3.0", "exactly 0 fraction digits"),
        (DEC_ALL_FRACTION, "1.00", "at most 0 integer digits"),
        (TS, "2024-01-02T03:04:05Z", "timestamp"),
        (TS, "2024-01-02T03:04:05.000000+00:00", "timestamp"),
        (TS, "2024-02-30T03:04:05.000000Z", "not a valid date and time"),
        (TS, "2024-01-02 03:04:05.000000Z", "timestamp"),
        (DATE, "2024-1-2", "date"),
        (DATE, "2024-02-30", "not a valid date"),
        (DATE, "0000-01-01", "not a valid date"),
        (DATE, 20240102, "date"),
        (BYTES, "AP8", "not base64"),
        (BYTES, "AP9=", "not canonical base64"),
        (BYTES, "A P8=", "not base64"),
        (BYTES, "-_8=", "not base64"),
        (ColumnSpec("s", "string"), 5, "string"),
        (ColumnSpec("n", "number"), "1", "number"),
        (ColumnSpec("z", "null"), 0, "null"),
    ],
)
def test_a_wire_value_that_is_not_canonical_is_refused(
    spec: ColumnSpec, wire: Any, needle: str
) -> None:
    with pytest.raises(SchemaError, match=needle) as info:
        check_wire_value(spec, wire)
    assert repr(spec.name) in info.value.message


def test_null_fits_every_nullable_column_only() -> None:
    check_wire_value(DEC, None)
    assert encode_value(TS, None) is None and decode_value(TS, None) is None
    with pytest.raises(SchemaError, match="'id' is not nullable"):
        check_wire_value(ColumnSpec("id", "integer", nullable=False), None)


@pytest.mark.parametrize(
    ("spec", "value", "needle"),
    [
        (INTEGER, 2**63, "64-bit"),
        (INTEGER, 1.0, "write a Python int"),
        (INTEGER, True, "write a Python int"),
        (DEC, 1.5, "write a decimal.Decimal or an int"),
        (DEC, decimal.Decimal("1.005"), "needs rounding to 2 fraction digits"),
        (DEC, decimal.Decimal("123456789"), "more than 8 integer digits"),
        (DEC, decimal.Decimal("NaN"), "finite"),
        (TS, dt.datetime(2024, 1, 1), "naive datetime names no instant"),
        (TS, dt.date(2024, 1, 1), "aware datetime"),
        (TS, "2024-01-02T03:04:05.000000Z", "aware datetime"),
        (TS, dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))), "out of range"),
        (DATE, dt.datetime(2024, 1, 1, tzinfo=UTC), "datetime.date"),
        (BYTES, "AP8=", "write bytes"),
    ],
)
def test_encode_refuses_what_does_not_fit(spec: ColumnSpec, value: Any, needle: str) -> None:
    with pytest.raises(SchemaError, match=needle):
        encode_value(spec, value)


_SPECS = st.sampled_from([INTEGER, DEC, DEC0, DEC_DEFAULT, DEC_ALL_FRACTION, TS, DATE, BYTES])


def _values(spec: ColumnSpec) -> st.SearchStrategy[Any]:
    match spec.type:
        case "integer":
            return st.integers(INTEGER_MIN, INTEGER_MAX)
        case "decimal":
            p, s = spec.precision or 38, spec.scale if spec.scale is not None else 9
            # From integers and an exponent: exact (Decimal arithmetic rounds to 28 digits).
            return st.integers(-(10**p) + 1, 10**p - 1).map(lambda n: decimal.Decimal(f"{n}E-{s}"))
        case "timestamp":
            return st.datetimes(
                min_value=dt.datetime(2, 1, 1),
                max_value=dt.datetime(9998, 12, 31),
                timezones=st.sampled_from(
                    [
                        UTC,
                        dt.timezone(dt.timedelta(hours=5, minutes=30)),
                        dt.timezone(dt.timedelta(hours=-8)),
                    ]
                ),
            )
        case "date":
            return st.dates()
        case _:
            return st.binary()


@given(st.data())
def test_every_value_round_trips_exactly_through_its_canonical_form(data: st.DataObject) -> None:
    spec = data.draw(_SPECS)
    value = data.draw(_values(spec))
    wire = encode_value(spec, value)
    check_wire_value(spec, wire)  # the gateway accepts what the client encodes
    assert decode_value(spec, wire) == value
    assert encode_value(spec, decode_value(spec, wire)) == wire
    canonical_json(wire)  # the deltaId covers it deterministically


def test_types_everywhere() -> None:
    dec = ColumnSpec("d", "decimal", precision=38, scale=9)
    assert [
        spark_type(ColumnSpec("c", t))
        for t in (
            "integer",
            "timestamp",
            "date",
            "bytes",
            "number",
            "string",
            "boolean",
            "json",
            "null",
        )
    ] == [  # type: ignore[arg-type]
        "bigint",
        "timestamp",
        "date",
        "binary",
        "double",
        "string",
        "boolean",
        "string",
        "string",
    ]
    assert spark_type(dec) == "decimal(38,9)"
    assert iceberg_type(dec) == "decimal(38, 9)"
    assert iceberg_type(TS) == "timestamptz"
    assert iceberg_type(INTEGER) == "long"
    assert [sql_type(s, "postgres") for s in (INTEGER, DEC, TS, DATE, BYTES)] == [
        "BIGINT",
        "NUMERIC(10,2)",
        "TIMESTAMPTZ",
        "DATE",
        "BYTEA",
    ]
    assert [sql_type(s, "mysql") for s in (INTEGER, DEC, TS, DATE, BYTES)] == [
        "BIGINT",
        "DECIMAL(10,2)",
        "DATETIME(6)",
        "DATE",
        "LONGBLOB",
    ]
    assert [sql_type(s, "bigquery") for s in (INTEGER, DEC, TS, DATE, BYTES)] == [
        "INT64",
        "NUMERIC(10,2)",
        "TIMESTAMP",
        "DATE",
        "BYTES",
    ]
    assert sql_type(dec, "bigquery") == "NUMERIC(38,9)"
    assert (
        sql_type(ColumnSpec("d", "decimal", precision=38, scale=10), "bigquery")
        == "BIGNUMERIC(38,10)"
    )
    assert (
        sql_type(ColumnSpec("d", "decimal", precision=31, scale=0), "bigquery")
        == "BIGNUMERIC(31,0)"
    )
    assert sql_type(ColumnSpec("d", "decimal", precision=38, scale=31), "mysql") == "VARCHAR(40)"
    assert {row.type.split("(")[0] for row in TYPE_MAPPING} == {
        "integer",
        "decimal",
        "timestamp",
        "date",
        "bytes",
        "number",
        "string",
        "boolean",
        "json",
        "null",
    }


@pytest.mark.parametrize(
    ("old", "new", "allowed"),
    [
        (INTEGER, ColumnSpec("id", "decimal"), True),
        (INTEGER, ColumnSpec("id", "decimal", precision=20, scale=2), False),
        (INTEGER, ColumnSpec("id", "number"), True),
        (DEC, ColumnSpec("amount", "number"), True),
        (DEC, ColumnSpec("amount", "decimal", precision=11, scale=3), True),
        (DEC, ColumnSpec("amount", "decimal", precision=10, scale=3), False),
        (DEC, ColumnSpec("amount", "decimal", precision=10, scale=1), False),
        (DEC, ColumnSpec("amount", "integer"), False),
        (ColumnSpec("n", "number"), ColumnSpec("n", "integer"), False),
        (TS, ColumnSpec("at", "string"), True),
        (ColumnSpec("z", "null"), ColumnSpec("z", "string"), False),
        (ColumnSpec("j", "json"), ColumnSpec("j", "string"), True),
        (TS, ColumnSpec("at", "date"), False),
        (ColumnSpec("x", "date", nullable=False), ColumnSpec("x", "date"), True),
        (DATE, ColumnSpec("day", "date", nullable=False), False),
        (DEC, DEC, True),
    ],
)
def test_widening(old: ColumnSpec, new: ColumnSpec, allowed: bool) -> None:
    why = widening_allowed(old, new)
    assert (why is None) is allowed, why
    if why is not None:
        assert repr(old.name) in why


def test_pyiceberg_takes_the_iceberg_types() -> None:
    from pyiceberg.types import DecimalType, LongType, NestedField, TimestamptzType

    assert NestedField(1, "d", iceberg_type(DEC), required=False).field_type == DecimalType(10, 2)
    assert NestedField(2, "i", iceberg_type(INTEGER)).field_type == LongType()
    assert NestedField(3, "t", iceberg_type(TS)).field_type == TimestamptzType()


@pytest.mark.parametrize(
    ("spec", "wire", "value"),
    [
        (DEC, 5, decimal.Decimal("5.00")),  # written while the column was an integer
        (DEC, "9007199254740993", None),  # too many integer digits for decimal(10,2)
        (DEC_DEFAULT, "9007199254740993", decimal.Decimal("9007199254740993.000000000")),
        (DEC, "1.5", decimal.Decimal("1.50")),  # written at a smaller scale
        (ColumnSpec("n", "number"), "12.50", 12.5),
        (ColumnSpec("n", "number"), "4611686018427387905", 4.611686018427388e18),
        (ColumnSpec("s", "string"), 30, "30"),
        (ColumnSpec("s", "string"), 1.5, "1.5"),
        (ColumnSpec("s", "string"), True, "true"),
        (ColumnSpec("s", "string"), {"b": 1, "a": [1]}, '{"a":[1],"b":1}'),
    ],
)
def test_values_written_before_a_widening_read_as_the_wider_type(
    spec: ColumnSpec, wire: Any, value: Any
) -> None:
    if value is None:
        with pytest.raises(SchemaError):
            decode_value(spec, wire)
        return
    decoded = decode_value(spec, wire)
    assert decoded == value and type(decoded) is type(value)
    if isinstance(value, decimal.Decimal):
        assert str(decoded) == str(value)


def test_the_decimal_holding_two_columns_is_the_narrowest_widening_of_both() -> None:
    integer = ColumnSpec("n", "integer")
    assert decimal_holding(integer, ColumnSpec("n", "decimal", precision=20, scale=2)) == (21, 2)
    assert decimal_holding(ColumnSpec("n", "decimal", precision=10, scale=4),
                           ColumnSpec("n", "decimal", precision=30, scale=1)) == (33, 4)
    assert decimal_holding(integer, ColumnSpec("n", "decimal", precision=38, scale=30)) is None
    assert decimal_holding(integer, ColumnSpec("n", "string")) is None
    wide = ColumnSpec("n", "decimal", precision=21, scale=2)  # a widening of both
    assert widening_allowed(integer, wide) is None
    assert widening_allowed(ColumnSpec("n", "decimal", precision=20, scale=2), wide) is None
