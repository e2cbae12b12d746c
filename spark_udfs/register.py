"""Register the decoders as Spark SQL functions (vectorised pandas UDFs) on a session.

pandas is imported at module level because pyspark resolves the UDF's ``pd.Series`` type hints
against this module's globals to pick the vectorised (Arrow) evaluation.

The pipeline runner calls :func:`register_udfs` on the session before it runs dbt in the same
process; models call the functions by these names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pandas as pd  # type: ignore[import-untyped]

from spark_udfs.decode import (
    hlc_to_timestamp,
    json_to_boolean,
    json_to_double,
    json_to_json_text,
    json_to_string,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["UDFS", "register_udfs"]

UDFS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "ls_json_string": (json_to_string, "string"),
    "ls_json_double": (json_to_double, "double"),
    "ls_json_boolean": (json_to_boolean, "boolean"),
    "ls_json_text": (json_to_json_text, "string"),
    "ls_hlc_to_timestamp": (hlc_to_timestamp, "timestamp"),
}
"""SQL name → (pure decoder, Spark return type)."""


def _vectorised(fn: Callable[[Any], Any], return_type: str) -> Any:
    from pyspark.sql.pandas.functions import pandas_udf

    def apply(values: pd.Series) -> pd.Series:
        out = [fn(None if v is None or v is pd.NA else v) for v in values]
        return pd.Series(out, dtype="object")

    return pandas_udf(apply, return_type)  # type: ignore[call-overload]


def register_udfs(spark: SparkSession) -> list[str]:
    """Register every UDF in :data:`UDFS` on ``spark``; return their SQL names."""
    for name, (fn, return_type) in UDFS.items():
        spark.udf.register(name, _vectorised(fn, return_type))
    return list(UDFS)
