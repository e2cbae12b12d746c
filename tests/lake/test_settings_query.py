"""Settings derivation (one place for catalog/Spark config) and query output formatting."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

from lakesync.lake.query import QueryResult, format_rows
from lakesync.lake.settings import LakeSettings


def test_embedded_defaults_live_under_the_data_dir(tmp_path: Path) -> None:
    s = LakeSettings.from_env(tmp_path, env={})
    assert s.catalog_uri == f"jdbc:sqlite:{tmp_path}/catalog.db"
    assert s.sqlalchemy_uri() == f"sqlite:///{tmp_path}/catalog.db"
    assert s.warehouse == (tmp_path / "warehouse").as_uri()
    conf = s.spark_conf()
    assert conf["spark.master"] == "local[2]"
    assert conf["spark.sql.catalog.lake.jdbc.init-catalog-tables"] == "false"
    assert conf["spark.sql.catalog.lake.cache-enabled"] == "false"
    assert conf["spark.sql.defaultCatalog"] == "lake"
    assert conf["spark.jars"].split(",")[1].endswith("iceberg-shaded-jackson-2.15.2.jar")


def test_cluster_and_postgres_catalog_come_from_the_environment(tmp_path: Path) -> None:
    s = LakeSettings.from_env(tmp_path, env={
        "LAKESYNC_CATALOG_URI": "jdbc:postgresql://127.0.0.1:5432/test",
        "LAKESYNC_CATALOG_USER": "post gres",
        "LAKESYNC_CATALOG_PASSWORD": "p@ss",
        "LAKESYNC_SPARK_MASTER": "spark://127.0.0.1:7077",
        "LAKESYNC_SPARK_CORES_MAX": "2",
        "LAKESYNC_WAREHOUSE": "file:///shared/wh",
    })
    assert s.sqlalchemy_uri() == "postgresql+psycopg://post%20gres:p%40ss@127.0.0.1:5432/test"
    conf = s.spark_conf()
    assert conf["spark.sql.catalog.lake.jdbc.user"] == "post gres"
    assert conf["spark.cores.max"] == "2"
    assert s.dbt_env()["LAKESYNC_CATALOG_PASSWORD"] == "p@ss"
    assert s.warehouse_path == Path("/shared/wh")


def test_json_format_is_one_object_per_row_with_exact_hlcs() -> None:
    rows = [("a", Decimal(2**64 - 1), {"k": [1]}), ("b", None, None)]
    result = QueryResult(["id", "_hlc", "meta"], rows)
    lines = list(format_rows(result, "json"))
    assert [json.loads(x) for x in lines] == [
        {"id": "a", "_hlc": "18446744073709551615", "meta": {"k": [1]}},
        {"id": "b", "_hlc": None, "meta": None},
    ]
    assert list(format_rows(result, "csv")) == [
        "id,_hlc,meta", 'a,18446744073709551615,"{""k"": [1]}"', "b,,",
    ]
