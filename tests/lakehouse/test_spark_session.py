"""One process, two lakes: the session :func:`spark_session` hands back reads the lake asked for.

A Spark session's catalogs are fixed when it starts, and ``getOrCreate()`` returns the running
one whatever settings it is given: a session left running by work on one data dir (the CLI's
``pipeline run`` after ``lakesync demo`` in one process) used to carry that lake into the next.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lakesync.lakehouse.bootstrap import bootstrap
from lakesync.lakehouse.settings import LakeSettings
from lakesync.lakehouse.spark import lake_spark_conf, spark_session

pytestmark = [pytest.mark.spark]


def _catalog_conf(settings: LakeSettings) -> dict[str, str]:
    conf = lake_spark_conf(settings)
    return {k: v for k, v in conf.items() if k.startswith("spark.sql.catalog.")}


def test_a_session_of_another_lake_is_replaced(tmp_path: Path) -> None:
    first = LakeSettings.from_env(tmp_path / "one", env={})
    second = LakeSettings.from_env(tmp_path / "two", env={})
    bootstrap(first)
    bootstrap(second)
    catalog = _catalog_conf(second)
    assert catalog != _catalog_conf(first)
    one = spark_session(first)
    try:
        one.sql("create table lake.lakesync.only_in_one (x int) using iceberg")
        two = spark_session(second)
        assert all(two.conf.get(k) == v for k, v in catalog.items())
        tables = {r.tableName for r in two.sql("show tables in lake.lakesync").collect()}
        assert "only_in_one" not in tables
        assert spark_session(second) is two  # the same lake: the running session is kept
    finally:
        spark_session(second).stop()
