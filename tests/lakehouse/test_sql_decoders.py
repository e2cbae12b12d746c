"""The models decode cells with Spark built-ins (macros/current_state.sql), so a plain ``dbt
build`` needs no Python UDF; fresh reads and destinations decode with the pure Python decoders
(lakesync/spark_udfs/decode.py). The two must agree on every canonical JSON text a cell can hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakesync.canonical import canonical_json
from lakesync.hlc import encode
from lakesync.spark_udfs.decode import (
    hlc_to_timestamp,
    json_to_boolean,
    json_to_double,
    json_to_json_text,
    json_to_string,
)
from tests.lakehouse.conftest import Lake

pytestmark = [pytest.mark.spark]

MACROS = Path(__file__).resolve().parents[2] / "macros" / "current_state.sql"
DECODERS = {
    "string": json_to_string,
    "number": json_to_double,
    "boolean": json_to_boolean,
    "json": json_to_json_text,
}
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
]


def _macro(name: str) -> Any:
    env = jinja2.Environment(autoescape=False)
    module = env.from_string(MACROS.read_text(encoding="utf-8")).make_module(
        {"exceptions": None, "ref": None, "is_incremental": None}
    )
    return getattr(module, name)


def _sql_decoded(lake: Lake, texts: list[str]) -> list[dict[str, Any]]:
    decode = _macro("lakesync_decode")
    frame = lake.spark.createDataFrame([(i, t) for i, t in enumerate(texts)], "i int, v string")
    frame.createOrReplaceTempView("cells_under_test")
    columns = ", ".join(f"{decode(t, 'v')} as `{t}`" for t in DECODERS)
    rows = lake.spark.sql(f"select i, {columns} from cells_under_test order by i").collect()
    return [r.asDict() for r in rows]


def _check(lake: Lake, values: list[Any]) -> None:
    texts = [canonical_json(v) for v in values]
    for text, row in zip(texts, _sql_decoded(lake, texts), strict=True):
        for kind, decoder in DECODERS.items():
            assert row[kind] == decoder(text), (kind, text)


def test_sql_decoders_equal_the_python_decoders_on_edge_values(lake: Lake) -> None:
    _check(lake, EDGES)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
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
