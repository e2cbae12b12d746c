"""Build the Spark session every Spark-side component shares (the runner, dbt, tests)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from lakesync.lakehouse.process_env import process_environment
from lakesync.lakehouse.settings import LakeSettings
from lakesync.spark_udfs import register_udfs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["driver_environment", "lake_spark_conf", "spark_session"]

_log = logging.getLogger(__name__)


def spark_session(settings: LakeSettings, app_name: str = "lakesync") -> SparkSession:
    """Get or create the process's Spark session configured for the lake,
    with the lake's SQL functions registered on it (:func:`lakesync.spark_udfs.register_udfs`:
    ``lakesync_decode_<type>``, ``lakesync_hlc_to_timestamp``).

    dbt-spark's session method calls ``getOrCreate()`` too, so a session built here first is the
    one dbt uses (the models themselves call only Spark built-ins).
    """
    # heavy, optional (extra "pipeline")
    from pyspark.sql import SparkSession  # noqa: PLC0415

    conf = lake_spark_conf(settings)
    active = SparkSession.getActiveSession()
    if active is not None and _other_lake(active, conf):
        # A session's catalogs are fixed when it starts: handing it back would read and write
        # another lake (a process that worked on one data dir, then another).
        _log.warning("stopping the Spark session of another lake to open %s", settings.data_dir)
        active.stop()
    builder = SparkSession.builder.appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    # Python UDF workers must run this venv's interpreter; PySpark reads it when the session
    # starts (a variable the user set wins).
    env = {
        "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
        **driver_environment(settings),
    }
    with process_environment(env, override=False):
        session = builder.getOrCreate()
    # Load the lake's catalog now, with these settings: dbt-spark's getOrCreate() later sets the
    # profile's values on this session, empty ones included (an S3 key left to the AWS chain),
    # and a catalog first loaded after that would take them.
    session.catalog.currentCatalog()
    register_udfs(session)
    return session


def driver_environment(settings: LakeSettings) -> dict[str, str]:
    """Environment of a process that runs a lake's Spark driver (the pipeline's session, the SQL
    endpoint's Thrift server), to apply where the process has no such variable already:
    ``SPARK_LOCAL_IP=127.0.0.1`` for a ``local[N]`` master, so in-process Spark binds loopback
    only; nothing on a cluster, whose executors connect back to the driver on the machine's
    address (Spark's choice, ``lake.spark_driver_host``, or the user's ``SPARK_LOCAL_IP``)."""
    return {"SPARK_LOCAL_IP": "127.0.0.1"} if settings.spark_master.startswith("local") else {}


def _other_lake(session: SparkSession, conf: dict[str, str]) -> bool:
    """Whether ``session`` was started with other catalog settings than ``conf``'s."""
    return any(
        session.conf.get(key, None) != value
        for key, value in conf.items()
        if key.startswith("spark.sql.catalog.")
    )


def lake_spark_conf(settings: LakeSettings, log: Path | None = None) -> dict[str, str]:
    """Every Spark setting of a lake JVM: :meth:`LakeSettings.spark_conf` plus the driver's log
    file (``log``, default :attr:`LakeSettings.spark_log`). The pipeline's session and the SQL
    endpoint (``lakesync.lakehouse.sql_server``) both start from this, so they see one lake."""
    return {**settings.spark_conf(), **_log_to_file(settings, log or settings.spark_log)}


_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
"""


def _log_to_file(settings: LakeSettings, log: Path) -> dict[str, str]:
    """Driver settings that send the JVM's log lines to ``log``.

    Spark's default log4j2 setup writes warnings to the terminal, where they would interleave
    with the CLI's own progress; they apply only when this process starts the JVM.
    """
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    config = settings.data_dir / f"{log.stem}-log4j2.properties"
    config.write_text(_LOG4J2.format(path=log), encoding="utf-8")
    return {"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={config.as_uri()}"}
