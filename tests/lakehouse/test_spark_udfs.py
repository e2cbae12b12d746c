"""The lake's Spark SQL functions (lakesync/spark_udfs/functions.py): every session the lake
builds answers them exactly as the pure decoders (lakesync/cells.py) decode, on the edge values the
models' SQL is checked on and on the raw landing table; a user's own session gets them from
``register_udfs``."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from pyspark.errors import AnalysisException

from lakesync.canonical import canonical_json
from lakesync.cells import decoder, hlc_to_timestamp
from lakesync.hlc import encode
from lakesync.schema import ColumnSpec
from lakesync.spark_udfs import FUNCTIONS, register_udfs
from tests.api.helpers import delta
from tests.lakehouse.conftest import Lake
from tests.lakehouse.test_sql_decoders import EDGES, EPOCH, SPECS, comparable

pytestmark = [pytest.mark.spark]


def _call(spec: ColumnSpec, arg: str) -> str:
    """The SQL function call that decodes ``arg`` as ``spec``'s column; a timestamp as epoch
    microseconds (PySpark would hand it over in the Python process's time zone)."""
    if spec.type == "decimal":
        return f"lakesync_decode_decimal({arg}, {spec.precision}, {spec.scale})"
    call = f"lakesync_decode_{spec.type}({arg})"
    return f"unix_micros({call})" if spec.type == "timestamp" else call


def test_the_lake_session_answers_the_functions_as_the_pure_decoders(lake: Lake) -> None:
    texts = [canonical_json(v) for v in EDGES]
    frame = lake.spark.createDataFrame(list(enumerate(texts)), "i int, v string")
    frame.createOrReplaceTempView("udf_cells_under_test")
    columns = [f"{_call(spec, 'v')} as `{spec.name}`" for spec in SPECS]
    # A decimal's text casts exactly to the column's own type.
    columns += [
        f"cast({_call(spec, 'v')} as decimal({spec.precision},{spec.scale})) as `{spec.name}_cast`"
        for spec in SPECS if spec.type == "decimal"
    ]
    rows = lake.rows(f"select i, {', '.join(columns)} from udf_cells_under_test order by i")
    assert len(rows) == len(texts)
    for text, row in zip(texts, rows, strict=True):
        for spec in SPECS:
            python = decoder(spec)(text)
            if spec.type == "decimal":
                assert row[f"{spec.name}_cast"] == python, (spec, text)
                python = None if python is None else format(python, "f")
            got, want = comparable(row[spec.name]), comparable(python)
            assert got == want, (spec, text)
            assert type(got) is type(want), (spec, text)


def test_the_lake_session_answers_hlc_to_timestamp_as_the_pure_function(lake: Lake) -> None:
    hlcs = [encode(1_700_000_000_123, 42), encode(0, 1), encode(253_402_300_799_999, 7), 2**64 - 1]
    frame = lake.spark.createDataFrame([(i, str(h)) for i, h in enumerate(hlcs)], "i int, h string")
    frame.createOrReplaceTempView("udf_hlcs_under_test")
    rows = lake.rows(
        "select i, unix_micros(lakesync_hlc_to_timestamp(cast(h as decimal(20,0)))) as us "
        "from udf_hlcs_under_test order by i"
    )
    assert [r["us"] for r in rows] == [comparable(hlc_to_timestamp(h)) for h in hlcs]
    assert rows[-1]["us"] is None  # past 9999-12-31


def test_spark_sql_over_the_landing_table_decodes_its_cells(lake: Lake) -> None:
    wall_ms = 1_700_000_000_123
    lake.land("gw-udfs", [delta(
        "INSERT", "r1", "c1", encode(wall_ms, 3), table="orders", title="é 😀",
        qty="4611686018427387905", price="12.50", due="1969-12-31T23:59:59.000001Z",
        day="1969-07-20", blob="AGEA", meta={"b": [1.0, None], "a": "x"},
    )])
    rows = lake.rows(
        "select c.`column` as name, lakesync_decode_string(c.value_json) as text, "
        "lakesync_decode_integer(c.value_json) as integer, "
        "cast(lakesync_decode_decimal(c.value_json, 10, 2) as decimal(10,2)) as price, "
        "unix_micros(lakesync_decode_timestamp(c.value_json)) as due, "
        "lakesync_decode_date(c.value_json) as day, lakesync_decode_bytes(c.value_json) as blob, "
        "lakesync_decode_json(c.value_json) as json, "
        "unix_millis(lakesync_hlc_to_timestamp(hlc)) as changed_ms "
        "from lakesync.landing lateral view explode(cells) t as c "
        "where gateway_id = 'gw-udfs' and table_name = 'orders'"
    )
    cell = {r["name"]: r for r in rows}
    assert set(cell) == {"title", "qty", "price", "due", "day", "blob", "meta"}
    assert cell["title"]["text"] == "é 😀"
    assert cell["title"]["integer"] is None  # a value of another type reads null
    assert cell["qty"]["integer"] == 2**62 + 1
    assert cell["price"]["price"] == Decimal("12.50")
    due = datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC)
    assert cell["due"]["due"] == (due - EPOCH) // timedelta(microseconds=1)
    assert cell["day"]["day"] == date(1969, 7, 20)
    assert bytes(cell["blob"]["blob"]) == b"\x00a\x00"
    assert cell["meta"]["json"] == '{"a":"x","b":[1,null]}'
    assert {r["changed_ms"] for r in rows} == {wall_ms}


def test_register_udfs_gives_a_users_own_session_the_functions(lake: Lake) -> None:
    # A new session shares the lake's JVM but has its own function registry.
    own: Any = lake.spark.newSession()
    with pytest.raises(AnalysisException, match="lakesync_decode_integer"):
        own.sql("select lakesync_decode_integer('7')").collect()
    register_udfs(own)
    calls = ", ".join(
        f"{name}(null, 10, 2)" if name == "lakesync_decode_decimal" else f"{name}(null)"
        for name in FUNCTIONS
    )
    row = own.sql(f"select lakesync_decode_integer('7') as n, {calls}").first()
    assert row[0] == 7 and list(row[1:]) == [None] * len(FUNCTIONS)
