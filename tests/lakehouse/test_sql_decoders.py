"""The models decode cells with Spark built-ins (macros/current_state.sql), so a plain ``dbt
build`` needs no Python UDF; fresh reads and destinations decode with the pure Python decoders
(lakesync/cells.py). The two must agree on every canonical JSON text a cell can hold."""

from __future__ import annotations

import base64
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import jinja2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakesync.canonical import canonical_json
from lakesync.cells import decoder, hlc_to_timestamp
from lakesync.hlc import encode
from lakesync.schema import ColumnSpec
from tests.lakehouse.conftest import Lake

pytestmark = [pytest.mark.spark]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MACROS = Path(__file__).resolve().parents[2] / "macros" / "current_state.sql"
# Every type, and decimals of several shapes (a scale of 0, no integer digits).
SPECS = [
    ColumnSpec("s", "string"),
    ColumnSpec("n", "number"),
    ColumnSpec("b", "boolean"),
    ColumnSpec("j", "json"),
    ColumnSpec("i", "integer"),
    ColumnSpec("d38", "decimal", 38, 9),
    ColumnSpec("d10", "decimal", 10, 2),
    ColumnSpec("d5", "decimal", 5, 0),
    ColumnSpec("d2", "decimal", 2, 2),
    ColumnSpec("t", "timestamp"),
    ColumnSpec("day", "date"),
    ColumnSpec("bin", "bytes"),
]
EDGES: list[Any] = [
    None,
    True,
    False,
    0,
    -0.0,
    1,
    -1,
    1.5,
    1e21,
    1e-7,
    2**53 + 1,
    -(2**63),
    2**63,
    1e20,
    1.7976931348623157e308,
    "",
    "null",
    "true",
    "1",
    '"',
    "\\",
    "é 😀 \u2028",
    "a\nb\tc\x01",
    [],
    {},
    [1, "x"],
    {"b": [1.0, None], "a": "é"},
    # integers beyond ±2^53 travel as strings of digits
    "4611686018427387905",
    "-9223372036854775808",
    "9223372036854775807",
    "9223372036854775808",
    "007",
    "-0",
    # decimals
    "12.50",
    "0.50",
    "-0.00",
    "0.5",
    "12.555",
    "99999.99",
    "100000000.00",
    "12345678901234567890123456789.123456789",
    "-99999999999999999999999999999.999999999",
    "123456789012345678901234567890.1",
    "1.1234567891",
    "1e5",
    "+1",
    "1.",
    ".5",
    # timestamps
    "2024-02-29T23:59:59.999999Z",
    "1969-12-31T23:59:59.000001Z",
    "0001-01-01T00:00:00.000000Z",
    "9999-12-31T23:59:59.999999Z",
    "2023-02-29T00:00:00.000000Z",
    "0000-01-01T00:00:00.000000Z",
    "2024-01-01T24:00:00.000000Z",
    "2024-01-01T23:59:60.000000Z",
    "2024-01-01T00:00:00.000Z",
    "2024-01-01T00:00:00.000000+00:00",
    # dates
    "1900-01-01",
    "1969-07-20",
    "0001-01-01",
    "9999-12-31",
    "2023-02-29",
    "0000-12-31",
    "2024-13-01",
    # bytes (base64)
    "AA==",
    "AAEC",
    "AAECAw==",
    "QQ==",
    "QR==",
    "QUI=",
    "QUJ=",
    "////",
    "+/+/",
    "A",
    "AB=",
    "AAEC\n",
]


def _macro(name: str) -> Any:
    env = jinja2.Environment(autoescape=False)
    module = env.from_string(MACROS.read_text(encoding="utf-8")).make_module(
        {"exceptions": None, "ref": None, "is_incremental": None}
    )
    return getattr(module, name)


def comparable(value: Any) -> Any:
    """A decoded value as both sides can be compared: an instant as microseconds (PySpark would
    hand a timestamp over in the Python process's time zone), binary as bytes."""
    if isinstance(value, datetime):
        return (value - EPOCH) // timedelta(microseconds=1)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _sql_decoded(lake: Lake, texts: list[str]) -> list[dict[str, Any]]:
    decode = _macro("lakesync_decode")
    frame = lake.spark.createDataFrame([(i, t) for i, t in enumerate(texts)], "i int, v string")
    frame.createOrReplaceTempView("cells_under_test")
    columns = []
    for spec in SPECS:
        sql = decode(spec.type, "v", spec.precision, spec.scale)
        if spec.type == "timestamp":
            sql = f"unix_micros({sql})"
        columns.append(f"{sql} as `{spec.name}`")
    rows = lake.spark.sql(
        f"select i, {', '.join(columns)} from cells_under_test order by i"
    ).collect()
    return [r.asDict() for r in rows]


def _check(lake: Lake, values: list[Any]) -> None:
    texts = [canonical_json(v) for v in values]
    for text, row in zip(texts, _sql_decoded(lake, texts), strict=True):
        for spec in SPECS:
            python = comparable(decoder(spec)(text))
            assert comparable(row[spec.name]) == python, (spec, text)
            assert type(comparable(row[spec.name])) is type(python), (spec, text)


def test_sql_decoders_equal_the_python_decoders_on_edge_values(lake: Lake) -> None:
    _check(lake, EDGES)


def test_the_typed_decoders_read_their_canonical_values() -> None:
    """The values a typed column holds (its canonical wire form) decode to Python values."""
    assert decoder(SPECS[4])('"4611686018427387905"') == 2**62 + 1
    assert decoder(SPECS[4])("-3") == -3
    assert decoder(SPECS[5])('"12345678901234567890123456789.123456789"') == Decimal(
        "12345678901234567890123456789.123456789")
    assert str(decoder(SPECS[6])("7")) == "7.00"  # an integer widened to a decimal
    assert decoder(SPECS[6])('"1.234"') is None  # would need rounding
    assert decoder(SPECS[9])('"1969-12-31T23:59:59.000001Z"') == datetime(
        1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC)
    assert decoder(SPECS[10])('"1900-01-01"') == date(1900, 1, 1)
    assert decoder(SPECS[11])('"AGEA"') == b"\x00a\x00"
    assert decoder(SPECS[1])('"12.50"') == 12.5  # a decimal widened to a number
    assert decoder(SPECS[0])("12") == "12"  # any value widened to a string: its JSON text


TYPED = (
    st.integers(-(2**64), 2**64).map(str)
    | st.decimals(allow_nan=False, allow_infinity=False, places=3).map(lambda d: format(d, "f"))
    | st.datetimes().map(lambda t: t.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    | st.dates().map(date.isoformat)
    | st.binary(max_size=7).map(lambda b: base64.b64encode(b).decode())
)
"""Wire values of the typed columns (and near misses: out of range, too many digits)."""
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | TYPED,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(JSON, min_size=1, max_size=80))
def test_sql_decoders_equal_the_python_decoders_on_any_json(lake: Lake, values: list[Any]) -> None:
    _check(lake, values)


def test_sql_hlc_to_timestamp_equals_the_python_one(lake: Lake) -> None:
    to_ts = _macro("lakesync_hlc_to_timestamp")
    hlcs = [encode(1_700_000_000_123, 42), encode(0, 1), encode(253_402_300_799_999, 7), 2**64 - 1]
    frame = lake.spark.createDataFrame([(i, str(h)) for i, h in enumerate(hlcs)], "i int, h string")
    frame.createOrReplaceTempView("hlcs_under_test")
    # unix_millis: PySpark would turn a timestamp into the Python process's local time.
    rows = lake.spark.sql(
        f"select i, unix_millis({to_ts('cast(h as decimal(20,0))')}) as ms "
        "from hlcs_under_test order by i"
    ).collect()
    expected = [hlc_to_timestamp(h) for h in hlcs]
    assert [r.ms for r in rows] == [
        None if t is None else round(t.timestamp() * 1000) for t in expected
    ]
