"""The lake's Spark SQL functions: decode raw landing cells and HLCs in Spark SQL.

``lakesync_decode_<type>(value_json)`` reads a cell's canonical JSON text (``value_json`` of the
landing table's ``cells``) as a column of that type would (docs/protocol.md §10), and
``lakesync_hlc_to_timestamp(hlc)`` gives an HLC's wall-clock part. Each is a pure decoder of
:mod:`lakesync.cells`, so a cell reads in Spark SQL exactly as fresh reads and destinations read
it, and as the dbt models' built-in SQL does (a test holds those equal).

They are Python UDFs: Spark runs them in Python workers, whose interpreter must import
``lakesync`` (the lake's sessions point ``PYSPARK_PYTHON`` at this one). A session answers them
once :func:`register_udfs` ran on it; every session the lake builds
(:func:`lakesync.lakehouse.spark.spark_session`) does. The SQL endpoint (``lakesync sql-server``)
runs no Python driver, so it has none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from functools import cache
from typing import TYPE_CHECKING, Any

from lakesync.cells import (
    decoder,
    hlc_to_timestamp,
    json_to_boolean,
    json_to_bytes,
    json_to_date,
    json_to_double,
    json_to_integer,
    json_to_json_text,
    json_to_string,
    json_to_timestamp,
)
from lakesync.column_types import check_spec
from lakesync.schema import ColumnSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["FUNCTIONS", "decode_decimal", "register_udfs"]


@cache  # a worker decodes many cells of few decimal types
def _decimal_decoder(precision: int | None, scale: int | None) -> Callable[[str | None], Any]:
    spec = ColumnSpec("value", "decimal", precision, scale)
    check_spec(spec)  # a precision or scale no column could have fails the query, saying which
    return decoder(spec)


def decode_decimal(value_json: str | None, precision: int | None, scale: int | None) -> str | None:
    """A ``decimal(precision, scale)`` cell (null precision and scale: 38 and 9) as its plain
    text with ``scale`` fraction digits, or None as :func:`lakesync.cells.json_to_decimal`.

    Text, because a Python UDF has one return type and a decimal's depends on its arguments;
    ``cast(... as decimal(p,s))`` of it with the same ``p`` and ``s`` is exact and never fails.
    """
    number: Decimal | None = _decimal_decoder(precision, scale)(value_json)
    return None if number is None else format(number, "f")


FUNCTIONS: dict[str, tuple[Callable[..., Any], str]] = {
    "lakesync_decode_string": (json_to_string, "string"),
    "lakesync_decode_number": (json_to_double, "double"),
    "lakesync_decode_boolean": (json_to_boolean, "boolean"),
    "lakesync_decode_json": (json_to_json_text, "string"),
    "lakesync_decode_integer": (json_to_integer, "bigint"),
    "lakesync_decode_decimal": (decode_decimal, "string"),
    "lakesync_decode_timestamp": (json_to_timestamp, "timestamp"),
    "lakesync_decode_date": (json_to_date, "date"),
    "lakesync_decode_bytes": (json_to_bytes, "binary"),
    "lakesync_hlc_to_timestamp": (hlc_to_timestamp, "timestamp"),
}
"""Each SQL function's name → the pure function it runs and its Spark SQL return type (the type
``analytics.<table>`` gives a column of that type, docs/tables.md; a decimal's as text)."""


def register_udfs(spark: SparkSession) -> None:
    """Register the lake's SQL functions (:data:`FUNCTIONS`) on ``spark``, a session of the
    lake's or the user's own: its Spark SQL and DataFrame expressions can then call them.
    Registering again replaces them (a function keeps its name and meaning)."""
    for name, (function, return_type) in FUNCTIONS.items():
        spark.udf.register(name, function, return_type)
