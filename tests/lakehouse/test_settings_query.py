"""Settings derivation (one place for catalog/Spark config) and query output formatting."""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest

from lakesync.errors import ConfigError
from lakesync.lakehouse.query import QueryResult, format_rows
from lakesync.lakehouse.settings import ICEBERG_VERSION, LakeSettings
from lakesync.lakehouse.spark import driver_environment, lake_spark_conf


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
    runtime, bundle = conf["spark.jars"].split(",")[:2]
    assert Path(runtime).name == f"iceberg-spark-runtime-3.5_2.12-{ICEBERG_VERSION}.jar"
    assert Path(bundle) == s.jars_dir / f"iceberg-aws-bundle-{ICEBERG_VERSION}.jar"


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


def test_spark_settings_come_from_the_shipped_profile_only(tmp_path: Path) -> None:
    profile = tmp_path / "profiles.yml"
    profile.write_text(
        "lakesync:\n  target: t\n  outputs:\n    t:\n      server_side_parameters:\n"
        "        spark.master: \"{{ env_var('LAKESYNC_SPARK_MASTER', 'local[1]') }}\"\n"
        "        spark.x: \"{{ env_var('UNSET_X', '') }}\"\n"
        "        spark.y: literal\n",
        encoding="utf-8",
    )
    s = LakeSettings.from_env(tmp_path, env={"LAKESYNC_SPARK_MASTER": "spark://m:7077"})
    s = replace(s, dbt_project_dir=tmp_path)
    # What the profile says, rendered with dbt_env(); an empty value is left out.
    assert s.spark_conf() == {"spark.master": "spark://m:7077", "spark.y": "literal"}


def test_the_shipped_profile_renders_every_setting_the_lake_needs(tmp_path: Path) -> None:
    s = LakeSettings.from_env(tmp_path, env={"LAKESYNC_SPARK_EXECUTOR_MEMORY": "3g"})
    conf = s.spark_conf()
    assert conf["spark.sql.extensions"].endswith("IcebergSparkSessionExtensions")
    assert conf["spark.sql.catalog.lake.uri"] == s.catalog_uri
    assert conf["spark.sql.catalog.lake.warehouse"] == s.warehouse
    assert conf["spark.sql.shuffle.partitions"] == "4"
    assert conf["spark.executor.memory"] == "3g"
    assert conf["spark.cores.max"] == "2147483647"  # Spark's own default: no cap
    assert conf["spark.sql.warehouse.dir"] == (tmp_path / "spark-warehouse").as_uri()
    assert "spark.sql.catalog.lake.jdbc.user" not in conf  # empty: left out
    bad = tmp_path / "p"
    bad.mkdir()
    (bad / "profiles.yml").write_text("lakesync: {}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"restore the shipped profiles\.yml"):
        replace(s, dbt_project_dir=bad).spark_conf()


LAKE_YAML = """\
data_dir: {data}
lake:
  catalog_uri: jdbc:postgresql://db:5432/lake
  catalog_user: lake
  warehouse: file:///file/wh
  spark_master: spark://file:7077
  spark_cores_max: 3
  spark_executor_memory: 2g
  jars_dir: /file/jars
  dbt_project_dir: /file/dbt
"""


def test_lake_section_of_lakesync_yaml_and_the_environment_wins(tmp_path: Path) -> None:
    path = tmp_path / "lakesync.yaml"
    path.write_text(LAKE_YAML.format(data=tmp_path / "from-file"))
    s = LakeSettings.from_env(env={"LAKESYNC_CONFIG": str(path)})
    assert s.data_dir == tmp_path / "from-file"
    assert s.catalog_uri == "jdbc:postgresql://db:5432/lake" and s.catalog_user == "lake"
    assert s.warehouse == "file:///file/wh" and s.spark_master == "spark://file:7077"
    assert s.spark_cores_max == 3 and s.spark_executor_memory == "2g"
    assert s.jars_dir == Path("/file/jars") and s.dbt_project_dir == Path("/file/dbt")
    env = {
        "LAKESYNC_CONFIG": str(path),
        "LAKESYNC_DATA_DIR": str(tmp_path / "from-env"),
        "LAKESYNC_SPARK_MASTER": "local[1]",
        "LAKESYNC_JARS_DIR": "/env/jars",
    }
    s = LakeSettings.from_env(env=env)
    assert s.data_dir == tmp_path / "from-env"
    assert s.spark_master == "local[1]" and s.jars_dir == Path("/env/jars")
    assert s.catalog_uri == "jdbc:postgresql://db:5432/lake"  # not overridden: the file's
    assert LakeSettings.from_env(tmp_path / "arg", env=env).data_dir == tmp_path / "arg"


def test_explicit_env_ignores_the_process_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("lake: {spark_master: spark://stray:7077, typo: 1}\n")
    monkeypatch.setenv("LAKESYNC_CONFIG", str(broken))
    monkeypatch.setenv("LAKESYNC_SPARK_MASTER", "spark://stray:7077")
    assert LakeSettings.from_env(tmp_path, env={}).spark_master == "local[2]"
    with pytest.raises(ConfigError, match="typo"):
        LakeSettings.from_env(tmp_path)


def test_bad_lake_settings_name_the_key_or_the_variable(tmp_path: Path) -> None:
    path = tmp_path / "lakesync.yaml"
    path.write_text("lake:\n  catalog_url: jdbc:sqlite:x\n")
    with pytest.raises(ConfigError, match=r"lakesync\.yaml.*catalog_url"):
        LakeSettings.from_env(tmp_path, env={"LAKESYNC_CONFIG": str(path)})
    with pytest.raises(ConfigError, match="LAKESYNC_SPARK_CORES_MAX='-2'"):
        LakeSettings.from_env(tmp_path, env={"LAKESYNC_SPARK_CORES_MAX": "-2"})


def test_the_driver_host_and_ports_reach_every_lake_session(tmp_path: Path) -> None:
    """``lake.spark_driver_host`` / ``_port`` / ``spark_block_manager_port`` go on the Spark
    settings every lake JVM starts from (the pipeline's and the worker's session, the SQL
    endpoint), and only when set: an empty ``spark.driver.host`` breaks a session."""
    env = {"LAKESYNC_SPARK_MASTER": "spark://m:7077", "LAKESYNC_SPARK_DRIVER_HOST": "drv.lan",
           "LAKESYNC_SPARK_DRIVER_PORT": "40000", "LAKESYNC_SPARK_BLOCK_MANAGER_PORT": "40001"}
    s = LakeSettings.from_env(tmp_path, env=env)
    assert (s.spark_driver_host, s.spark_driver_port, s.spark_block_manager_port) == (
        "drv.lan", 40000, 40001)
    driver = {"spark.driver.host": "drv.lan", "spark.driver.port": "40000",
              "spark.blockManager.port": "40001"}
    assert s.driver_conf() == driver
    assert lake_spark_conf(s).items() >= driver.items()
    unset = lake_spark_conf(LakeSettings.from_env(tmp_path, env={}))
    assert not unset.keys() & {*driver, "spark.driver.bindAddress"}
    only_host = LakeSettings.from_env(tmp_path, env={"LAKESYNC_SPARK_DRIVER_HOST": "::1"})
    assert only_host.driver_conf() == {"spark.driver.host": "::1"}


def test_the_driver_and_block_manager_ports_must_differ(tmp_path: Path) -> None:
    env = {"LAKESYNC_SPARK_DRIVER_PORT": "40000", "LAKESYNC_SPARK_BLOCK_MANAGER_PORT": "40000"}
    with pytest.raises(ConfigError, match=r"spark_driver_port and lake\.spark_block_manager_port"):
        LakeSettings.from_env(tmp_path, env=env)


def test_spark_binds_loopback_only_for_a_local_master(tmp_path: Path) -> None:
    local = LakeSettings.from_env(tmp_path, env={})
    assert driver_environment(local) == {"SPARK_LOCAL_IP": "127.0.0.1"}
    cluster = LakeSettings.from_env(tmp_path, env={"LAKESYNC_SPARK_MASTER": "spark://m:7077"})
    assert driver_environment(cluster) == {}


def test_an_http_catalog_uri_selects_the_rest_catalog_for_spark(tmp_path: Path) -> None:
    """``http(s)://`` is a REST catalog: Spark gets type rest, the warehouse *name*, the
    credential or token, and asks for vended credentials; the JDBC-only settings are left out."""
    s = LakeSettings.from_env(tmp_path, env={
        "LAKESYNC_CATALOG_URI": "https://catalog.example:8181/api/catalog",
        "LAKESYNC_CATALOG_WAREHOUSE": "prod",
        "LAKESYNC_CATALOG_CREDENTIAL": "id:secret",
    })
    assert s.is_rest and not s.is_sqlite and s.catalog_type == "rest"
    conf = s.spark_conf()
    assert conf["spark.sql.catalog.lake.type"] == "rest"
    assert conf["spark.sql.catalog.lake.uri"] == "https://catalog.example:8181/api/catalog"
    assert conf["spark.sql.catalog.lake.warehouse"] == "prod"
    assert conf["spark.sql.catalog.lake.credential"] == "id:secret"
    assert conf["spark.sql.catalog.lake.header.X-Iceberg-Access-Delegation"] == (
        "vended-credentials")
    assert "spark.sql.catalog.lake.jdbc.init-catalog-tables" not in conf
    assert "spark.sql.catalog.lake.token" not in conf
    assert s.secrets == ["id:secret", "secret"]
    token = LakeSettings.from_env(tmp_path, env={
        "LAKESYNC_CATALOG_URI": "http://127.0.0.1:8181", "LAKESYNC_CATALOG_TOKEN": "t0k",
    })
    conf = token.spark_conf()
    assert conf["spark.sql.catalog.lake.token"] == "t0k"
    assert "spark.sql.catalog.lake.warehouse" not in conf  # no name: the catalog's default
    with pytest.raises(ConfigError, match="not a JDBC catalog"):
        token.sqlalchemy_uri()
    jdbc = LakeSettings.from_env(tmp_path, env={}).spark_conf()
    assert jdbc["spark.sql.catalog.lake.type"] == "jdbc"
    assert "spark.sql.catalog.lake.header.X-Iceberg-Access-Delegation" not in jdbc


def test_catalog_secrets_resolve_references_and_errors_name_no_value(tmp_path: Path) -> None:
    secret_file = tmp_path / "credential"
    secret_file.write_text("client:from-file\n", encoding="utf-8")
    path = tmp_path / "lakesync.yaml"
    path.write_text(
        "lake:\n  catalog_uri: http://127.0.0.1:8181\n"
        f"  catalog_credential: ${{file:{secret_file}}}\n"
        "  catalog_token: ${CATALOG_TOKEN_VAR}\n"
        "  catalog_password: pre-${PW_VAR}\n",
        encoding="utf-8",
    )
    env = {"LAKESYNC_CONFIG": str(path), "CATALOG_TOKEN_VAR": "tok", "PW_VAR": "pw"}
    s = LakeSettings.from_env(tmp_path, env=env)
    assert s.catalog_credential == "client:from-file"
    assert s.catalog_token == "tok" and s.catalog_password == "pre-pw"
    assert s.dbt_env()["LAKESYNC_CATALOG_CREDENTIAL"] == "client:from-file"
    with pytest.raises(ConfigError, match=r"lake\.catalog_token: .*CATALOG_TOKEN_VAR is not set"):
        LakeSettings.from_env(tmp_path, env={"LAKESYNC_CONFIG": str(path), "PW_VAR": "pw"})
    with pytest.raises(ConfigError, match=r"lake\.catalog_uri 'thrift://h:9083' is not supported"):
        LakeSettings.from_env(tmp_path, env={"LAKESYNC_CATALOG_URI": "thrift://h:9083"})


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
