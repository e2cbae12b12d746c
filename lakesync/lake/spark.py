"""Build the Spark session every Spark-side component shares (the runner, dbt, tests)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from lakesync.lake.settings import LakeSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["spark_session"]


def spark_session(settings: LakeSettings, app_name: str = "lakesync") -> SparkSession:
    """Get or create the process's Spark session configured for the lake (STACK.md settings).

    dbt-spark's session method calls ``getOrCreate()`` too, so a session built here first is the
    one dbt uses, with the UDFs the runner registered on it.
    """
    # Python UDF workers must run this venv's interpreter, and daemons must bind loopback only.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    for key, value in settings.spark_conf().items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
