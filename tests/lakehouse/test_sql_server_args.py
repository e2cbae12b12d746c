"""`lakesync sql-server` without a JVM: its command line, its bind-address guard, its errors."""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lakesync.cli.main import app
from lakesync.errors import ValidationError
from lakesync.lakehouse.bootstrap import init_catalog_tables
from lakesync.lakehouse.settings import LakeSettings
from lakesync.lakehouse.spark import lake_spark_conf
from lakesync.lakehouse.sql_server import (
    SqlServer,
    SqlServerError,
    check_bind_address,
    thrift_server_argv,
    thrift_server_env,
)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_hosts_need_no_flag(host: str) -> None:
    check_bind_address(host, allow_remote=False)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "db.example.com"])
def test_other_hosts_are_refused_unless_allowed(host: str) -> None:
    with pytest.raises(ValidationError, match="--allow-remote"):
        check_bind_address(host, allow_remote=False)
    check_bind_address(host, allow_remote=True)


def test_the_server_gets_the_pipelines_spark_settings(tmp_path: Path) -> None:
    settings = LakeSettings.from_env(tmp_path, env={})
    conf = lake_spark_conf(settings, tmp_path / "sql-server.log")
    jar, keyfile = tmp_path / "door.jar", tmp_path / "door.key"
    argv = thrift_server_argv(Path("/spark"), conf, "127.0.0.1", 10001,
                              ["hive.server2.idle.session.timeout=1h"], (jar, keyfile))
    assert argv[:3] == ["/spark/bin/spark-submit", "--class",
                        "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"]
    assert argv[-1] == "spark-internal"
    pairs = list(itertools.pairwise(argv))
    confs = dict(v.split("=", 1) for k, v in pairs if k == "--conf")
    for key in ("spark.sql.catalog.lake.uri", "spark.sql.defaultCatalog", "spark.jars",
                "spark.sql.extensions"):
        assert confs[key] == settings.spark_conf()[key]
    assert "sql-server" in confs["spark.driver.extraJavaOptions"]  # its own log file
    assert f"-Dlakesync.sql.keyfile={keyfile}" in confs["spark.driver.extraJavaOptions"]
    assert confs["spark.driver.extraClassPath"].split(":") == [
        *confs["spark.jars"].split(","), str(jar)]
    assert confs["spark.sql.runSQLOnFiles"] == "false"
    assert confs["spark.sql.variable.substitute"] == "false"
    hive = [v for k, v in pairs if k == "--hiveconf"]
    # The operator's tuning first, then what the endpoint decides (the last one wins).
    assert hive == ["hive.server2.idle.session.timeout=1h", "hive.server2.thrift.port=10001",
                    "hive.server2.thrift.bind.host=127.0.0.1",
                    "hive.server2.transport.mode=binary", "hive.server2.enable.doAs=false",
                    "hive.server2.authentication=CUSTOM",
                    "hive.server2.custom.authentication.class=lakesync.FrontDoorAuthenticator"]


@pytest.mark.parametrize("item", [
    "hive.server2.authentication=NONE", "hive.server2.authentication=NOSASL",
    "hive.server2.custom.authentication.class=x.Y", "hive.server2.thrift.port=1",
    "hive.server2.transport.mode=http", "spark.sql.runSQLOnFiles=true",
])
def test_a_hiveconf_that_decides_who_gets_in_is_refused(item: str) -> None:
    with pytest.raises(ValidationError, match="decides authentication"):
        thrift_server_argv(Path("/spark"), {}, "127.0.0.1", 10000, [item])


def test_the_server_environment_holds_no_secret(tmp_path: Path) -> None:
    settings = LakeSettings.from_env(tmp_path, env={})
    env = {"PATH": "/bin", "HOME": "/root", "JAVA_HOME": "/jdk", "LC_ALL": "C.UTF-8",
           "AWS_REGION": "eu-west-1", "LAKESYNC_JWT_SECRET": "s3cr3t", "DATABASE_URL": "pg://x",
           "LAKESYNC_DEST_PG": "postgresql://u:pw@h/db", "GITHUB_TOKEN": "t"}
    process = thrift_server_env(settings, env, Path("/spark"))
    assert {"PATH", "HOME", "JAVA_HOME", "LC_ALL", "AWS_REGION"} <= set(process)
    assert not {"LAKESYNC_JWT_SECRET", "DATABASE_URL", "LAKESYNC_DEST_PG",
                "GITHUB_TOKEN"} & set(process)


def test_on_a_cluster_the_server_is_a_driver_the_workers_reach(tmp_path: Path) -> None:
    """``lakesync sql-server`` with a ``spark://`` master: not pinned to loopback (executors on
    other machines connect back to it), with the configured driver host and fixed ports."""
    env = {"LAKESYNC_SPARK_MASTER": "spark://m:7077", "LAKESYNC_SPARK_DRIVER_HOST": "10.1.2.3",
           "LAKESYNC_SPARK_DRIVER_PORT": "40000", "LAKESYNC_SPARK_BLOCK_MANAGER_PORT": "40001"}
    settings = LakeSettings.from_env(tmp_path, env=env)
    argv = thrift_server_argv(Path("/spark"), lake_spark_conf(settings), "0.0.0.0", 10000)
    confs = [v for k, v in itertools.pairwise(argv) if k == "--conf"]
    assert {"spark.master=spark://m:7077", "spark.driver.host=10.1.2.3",
            "spark.driver.port=40000", "spark.blockManager.port=40001"} <= set(confs)
    process = thrift_server_env(settings, {"PATH": "/bin"}, Path("/spark"))
    assert "SPARK_LOCAL_IP" not in process and process["SPARK_HOME"] == "/spark"
    # A local master keeps Spark's ports on loopback, unless the user's environment says else.
    local = LakeSettings.from_env(tmp_path, env={})
    assert thrift_server_env(local, {}, Path("/spark"))["SPARK_LOCAL_IP"] == "127.0.0.1"
    mine = thrift_server_env(local, {"SPARK_LOCAL_IP": "10.9.9.9"}, Path("/spark"))
    assert mine["SPARK_LOCAL_IP"] == "10.9.9.9"


def test_a_hiveconf_without_a_value_is_refused() -> None:
    with pytest.raises(ValidationError, match="KEY=VALUE"):
        thrift_server_argv(Path("/spark"), {}, "127.0.0.1", 10000, ["nonsense"])


def test_a_taken_port_is_refused_before_spark_starts(tmp_path: Path) -> None:
    settings = LakeSettings.from_env(tmp_path, env={})
    init_catalog_tables(settings)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SqlServerError, match=f"127.0.0.1:{port}: the address is in use"):
            SqlServer(settings, port=port).start()


def test_cli_refuses_a_remote_host_and_a_missing_lake(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["sql-server", "--data-dir", str(tmp_path), "--host",
                                   "0.0.0.0"])
    assert out.exit_code == 2 and "--allow-remote" in " ".join(out.output.split())
    out = CliRunner().invoke(app, ["sql-server", "--data-dir", str(tmp_path / "none")],
                             env={"LAKESYNC_JWT_SECRET": "a-secret-of-the-gateway"})
    assert out.exit_code == 1 and "no lake in" in out.output


def test_cli_needs_the_secret_unless_told_no_auth_which_is_loopback_only(
    tmp_path: Path,
) -> None:
    out = CliRunner().invoke(app, ["sql-server", "--data-dir", str(tmp_path)],
                             env={"LAKESYNC_JWT_SECRET": ""})
    assert out.exit_code == 2 and "LAKESYNC_JWT_SECRET is not set" in out.output
    assert "--no-auth" in out.output
    out = CliRunner().invoke(app, ["sql-server", "--data-dir", str(tmp_path), "--no-auth",
                                   "--host", "0.0.0.0", "--allow-remote"])
    assert out.exit_code == 2 and "loopback only" in " ".join(out.output.split())
    out = CliRunner().invoke(app, ["sql-server", "--data-dir", str(tmp_path / "none"),
                                   "--no-auth"], env={"LAKESYNC_JWT_SECRET": ""})
    assert out.exit_code == 1 and "no lake in" in out.output


def test_cli_refuses_a_bad_gateway_id(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["sql-server", "--data-dir", str(tmp_path), "--gw", "../x"],
                             env={"LAKESYNC_JWT_SECRET": "a-secret-of-the-gateway"})
    assert out.exit_code == 2 and "gateway" in out.output
