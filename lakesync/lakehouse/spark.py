"""Build the Spark session every Spark-side component shares (the runner, dbt, tests)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from lakesync.lakehouse.settings import LakeSettings

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
    # heavy, optional (extra "pipeline")
    from pyspark.sql import SparkSession  # noqa: PLC0415

    builder = SparkSession.builder.appName(app_name)
    for key, value in {**settings.spark_conf(), **_log_to_file(settings)}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
"""


def _log_to_file(settings: LakeSettings) -> dict[str, str]:
    """Driver settings that send the JVM's log lines to :attr:`LakeSettings.spark_log`.

    Spark's default log4j2 setup writes warnings to the terminal, where they would interleave
    with the CLI's own progress; they apply only when this process starts the JVM.
    """
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    config = settings.data_dir / "spark-log4j2.properties"
    config.write_text(_LOG4J2.format(path=settings.spark_log), encoding="utf-8")
    return {"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={config.as_uri()}"}
