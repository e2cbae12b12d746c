"""`lakesync sql-server`: analysts with a token read the lake over HiveServer2; nothing else.

The lake is built by the real pipeline (two runs, so `analytics.todos` has an earlier snapshot
to travel to); the in-process Spark session is then stopped, and the endpoint runs as a user
starts it (the CLI command, with the gateway's secret in its environment), driven by PyHive,
beeline (shipped with PySpark) and dbt's `thrift` method. Each way out of the lake an analyst
found before (the process environment, JVM reflection, local files read and written, DDL, jars,
server settings) is tried and must be refused with nothing read or written; the secret must show
in no output, and the Thrift server's process must not even hold it.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lakesync.delta import RowDelta
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.runner import run_pipeline
from lakesync.lakehouse.sql_server import SqlServer
from lakesync.schema import parse_schema
from lakesync.sql_functions import SPARK_BUILTIN_FUNCTIONS
from lakesync.tokens import mint_token
from tests.gateway_process import free_port
from tests.lakehouse.conftest import make_lake

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TODOS = parse_schema({"table": "todos", "columns": [{"name": "title", "type": "string"}]})
GW = "gw1"
SECRET = "sql-endpoint-test-secret-3f9c1d7e5b"
CANARY = "canary-value-that-must-stay-in-the-cli-1b2c"


@dataclass(frozen=True)
class Served:
    settings: Any
    port: int
    first_snapshot: int  # analytics.todos after the first run: only r1
    stderr: Path


def _token(role: str = "analyst", gw: str = "lakesync", secret: str = SECRET,
           ttl_s: int = 3600, now: float | None = None) -> str:
    return mint_token(secret, "ana", gw, role, ttl_s=ttl_s, now=now)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("sql-endpoint")
    lake = make_lake(root / "lake")
    try:
        lake.land(GW, [RowDelta.create("INSERT", "todos", "r1", "c1", {"title": "one"}, 10)])
        run_pipeline(settings=lake.settings, schemas=[TODOS], tests=False)
        todos = open_catalog(lake.settings).load_table("analytics.todos")
        snap = todos.current_snapshot()
        assert snap is not None
        lake.land(GW, [RowDelta.create("INSERT", "todos", "r2", "c1", {"title": "two"}, 11)])
        run_pipeline(settings=lake.settings, schemas=[TODOS], tests=False)
    finally:
        lake.spark.stop()  # one JVM at a time on a 2-core machine
        lake.log.close()
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAKESYNC_JWT_SECRET": SECRET,
           "LAKESYNC_TEST_CANARY": CANARY}
    stderr = root / "sql-server.stderr"
    with stderr.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lakesync.cli", "sql-server", "--data-dir",
             str(lake.settings.data_dir), "--port", str(port)],
            env=env, stderr=err, stdout=subprocess.DEVNULL,
        )
    deadline = time.monotonic() + 300
    while "serving the lake at" not in stderr.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"sql-server did not serve (exit {proc.poll()}): {stderr.read_text()}")
        time.sleep(0.2)
    assert f"jdbc:hive2://127.0.0.1:{port}/default" in stderr.read_text()
    yield Served(lake.settings, port, snap.snapshot_id, stderr)
    proc.terminate()  # a service manager's stop: the CLI stops the Thrift server and exits
    assert proc.wait(60) == 0
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def _connect(port: int, password: str | None, auth: str = "LDAP") -> Any:
    from pyhive import hive

    return hive.connect("127.0.0.1", port, username="analyst", auth=auth, password=password)


def _pyhive(served: Served, sql: str, token: str | None = None) -> list[tuple[object, ...]]:
    with _connect(served.port, token or _token()) as con:
        cur = con.cursor()
        cur.execute(sql)
        return list(cur.fetchall())


def _beeline(served: Served, *args: str) -> subprocess.CompletedProcess[str]:
    import pyspark

    beeline = Path(pyspark.__file__).parent / "bin" / "beeline"
    return subprocess.run(
        [str(beeline), "-u", f"jdbc:hive2://127.0.0.1:{served.port}/default",
         "--silent=true", "--outputformat=csv2", *args],
        check=False, capture_output=True, text=True, timeout=300,
    )


# -- what analysts can do ---------------------------------------------------------------------


def test_an_analyst_token_reads_the_analytics_table(served: Served) -> None:
    sql = f"select row_id, title from analytics.todos where gateway_id = '{GW}' order by row_id"
    assert _pyhive(served, sql) == [("r1", "one"), ("r2", "two")]


def test_an_admin_token_reads_too(served: Served) -> None:
    sql = f"select count(*) from analytics.todos where gateway_id = '{GW}'"
    assert _pyhive(served, sql, _token(role="admin")) == [(2,)]


def test_a_time_travel_snapshot_reads(served: Served) -> None:
    sql = (f"select row_id from analytics.todos version as of {served.first_snapshot} "
           f"where gateway_id = '{GW}'")
    assert _pyhive(served, sql) == [("r1",)]


def test_the_catalog_can_be_listed_and_described(served: Served) -> None:
    assert ("todos",) in [(r[1],) for r in _pyhive(served, "show tables in analytics")]
    described = [r[0] for r in _pyhive(served, "describe analytics.todos")]
    assert {"row_id", "title", "gateway_id"} <= set(described)
    assert _pyhive(served, "explain select * from analytics.todos")


def test_every_allowed_function_is_one_spark_has(served: Served) -> None:
    listed = {r[0] for r in _pyhive(served, "show system functions")}
    assert listed >= SPARK_BUILTIN_FUNCTIONS


def test_beeline_reads_with_a_token(served: Served) -> None:
    out = _beeline(served, "-n", "analyst", "-p", _token(), "-e",
                   f"select title from analytics.todos where gateway_id = '{GW}' order by title")
    assert out.returncode == 0, out.stderr
    # beeline echoes its prompt (`0: jdbc:hive2://…>`) before the csv2 result.
    assert out.stdout.split()[-3:] == ["title", "one", "two"]


def test_dbt_thrift_target_reads_through_it(served: Served, tmp_path: Path) -> None:
    # The profiles.yml `thrift` target, as a dbt user runs it next to the server.
    env = {**os.environ, **served.settings.dbt_env(), "LAKESYNC_SQL_PORT": str(served.port),
           "LAKESYNC_SQL_TOKEN": _token()}
    dbt = Path(sys.executable).parent / "dbt"
    out = subprocess.run(
        [str(dbt), "show", "--target", "thrift", "--project-dir", str(ROOT),
         "--profiles-dir", str(ROOT), "--target-path", str(tmp_path / "target"),
         "--log-path", str(tmp_path / "logs"), "--output", "json",
         "--inline", f"select count(*) as n from analytics.todos where gateway_id = '{GW}'"],
        check=False, env=env, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert '"n": 2' in out.stdout


# -- who is refused at connect ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("password", "auth", "said"),
    [
        (None, "NONE", "as the password"),  # PyHive's unauthenticated PLAIN sends a dummy one
        ("", "LDAP", "as the password"),
        (_token(secret="another-secret-of-another-deployment"), "LDAP", "signature"),
        (_token(ttl_s=60, now=time.time() - 3600), "LDAP", "expired"),
        (_token(gw="shop"), "LDAP", "not 'lakesync'"),
        (_token(role="client"), "LDAP", "--role analyst"),
    ],
    ids=["unauthenticated", "empty", "wrong-secret", "expired", "other-gateway", "client-role"],
)
def test_a_connection_without_a_good_token_is_refused(
    served: Served, password: str | None, auth: str, said: str
) -> None:
    with pytest.raises(Exception, match=re.escape(said)):
        _connect(served.port, password or ("" if auth == "LDAP" else None), auth).close()


def test_beeline_without_a_token_is_refused(served: Served) -> None:
    out = _beeline(served, "-n", "analyst", "-e", "select 1")
    assert out.returncode != 0
    assert "as the password" in out.stdout + out.stderr


def test_the_thrift_server_behind_lets_no_one_else_in(served: Served) -> None:
    """Spark's own port is on loopback: a local user who finds it is still refused."""
    cmdline = _thrift_server_cmdline(served)
    backend = int(re.search(r"hive\.server2\.thrift\.port=(\d+)", cmdline)[1])  # type: ignore[index]
    assert backend != served.port
    for auth, password in (("NONE", None), ("LDAP", _token()), ("LDAP", SECRET)):
        with pytest.raises(Exception, match=r"Error validating|connect through lakesync"):
            _connect(backend, password, auth).close()


def test_a_session_ends_what_it_may_run_when_its_token_expires(served: Served) -> None:
    with _connect(served.port, _token(ttl_s=3)) as con:
        cur = con.cursor()
        deadline = time.monotonic() + 120
        while True:
            try:
                cur.execute("select 1")
                cur.fetchall()
            except Exception as exc:
                assert "expired" in str(exc)
                break
            assert time.monotonic() < deadline, "the expired token still runs statements"
            time.sleep(0.5)


# -- each way out of the lake, refused --------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "select java_method('java.lang.System', 'getenv', 'LAKESYNC_JWT_SECRET')",
        "select reflect('java.lang.System', 'getenv', 'LAKESYNC_TEST_CANARY')",
        "select reflect('java.lang.System', 'getProperty', 'user.name')",
        "select `JAVA_METHOD`('java.lang.System', 'getenv', 'LAKESYNC_JWT_SECRET')",
        "select * from text.`/etc/hostname`",
        "select * from `text`.`{canary_file}`",
        "select * from json.`/etc`",
        "select in_file('x', '/etc/hostname')",
        "select transform(title) using 'cat' as (t) from analytics.todos",
        "insert overwrite directory 'file://{out_dir}' using csv select 'x'",
        "insert into analytics.todos select * from analytics.todos",
        "create table analytics.stolen as select 1 as x",
        "drop table analytics.todos",
        "add jar /tmp/evil.jar",
        "create function evil as 'java.lang.Runtime' using jar '/tmp/evil.jar'",
        "set spark.sql.runSQLOnFiles=true",
        "set",
        "set -v",
        "cache table analytics.todos",
        "select 1; select reflect('java.lang.System', 'getenv', 'LAKESYNC_JWT_SECRET')",
        "select '${{env:HOME}}', '${{system:user.name}}'",
        "show tables like '${{spark:spark.sql.catalog.lake.uri}}'",
    ],
)
def test_each_escape_is_refused(served: Served, sql: str, tmp_path: Path) -> None:
    canary_file = tmp_path / "canary.txt"
    canary_file.write_text(CANARY)
    out_dir = tmp_path / "written"
    statement = sql.format(canary_file=canary_file, out_dir=out_dir)
    with pytest.raises(Exception, match="refused") as refused:
        _pyhive(served, statement)
    assert SECRET not in str(refused.value) and CANARY not in str(refused.value)
    assert not out_dir.exists()
    tables = {t[1] for t in open_catalog(served.settings).list_tables("analytics")}
    assert tables == {"todos"}
    assert _pyhive(served, "select count(*) from analytics.todos") == [(2,)]


def test_beeline_sees_the_refusal_and_not_the_secret(served: Served) -> None:
    out = _beeline(served, "-n", "analyst", "-p", _token(), "-e",
                   "select java_method('java.lang.System','getenv','LAKESYNC_JWT_SECRET')")
    assert out.returncode != 0
    assert "refused" in out.stdout + out.stderr
    assert SECRET not in out.stdout + out.stderr


def test_a_session_setting_cannot_open_the_lake(served: Served) -> None:
    """Settings a client sends when it opens a session (``set:hiveconf:…``) are dropped."""
    from pyhive import hive

    with hive.connect("127.0.0.1", served.port, username="analyst", auth="LDAP",
                      password=_token(),
                      configuration={"spark.sql.runSQLOnFiles": "true",
                                     "set:hiveconf:spark.sql.runSQLOnFiles": "true"}) as con:
        cur = con.cursor()
        cur.execute("set spark.sql.session.timeZone")
        assert cur.fetchall()
        with pytest.raises(Exception, match="refused"):
            cur.execute("select * from text.`/etc/hostname`")


# -- the secret stays out ---------------------------------------------------------------------


def _thrift_server_pid(served: Served) -> int:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "HiveThriftServer2" in cmdline and str(served.settings.data_dir) in cmdline:
            return int(proc.name)
    pytest.fail("no Thrift server process found")


def _thrift_server_cmdline(served: Served) -> str:
    return (Path("/proc") / str(_thrift_server_pid(served)) / "cmdline").read_bytes().decode()


def test_the_thrift_server_holds_no_secret_of_the_deployment(served: Served) -> None:
    pid = _thrift_server_pid(served)
    environ = (Path("/proc") / str(pid) / "environ").read_bytes().decode(errors="replace")
    names = {item.split("=", 1)[0] for item in environ.split("\0") if item}
    assert "LAKESYNC_JWT_SECRET" not in names and "LAKESYNC_TEST_CANARY" not in names
    assert SECRET not in environ and CANARY not in environ
    assert SECRET not in _thrift_server_cmdline(served)


def test_no_output_holds_the_secret(served: Served) -> None:
    # After the refusals above have been logged (the module's tests run in order).
    _pyhive(served, "select 1")
    with pytest.raises(Exception, match="refused"):
        _pyhive(served, "select java_method('java.lang.System','getenv','LAKESYNC_JWT_SECRET')")
    workdir = served.settings.data_dir / "sql-server"
    outputs = [served.stderr, served.settings.data_dir / "sql-server.log",
               workdir / "spark-submit.out", *workdir.glob("*.log")]
    said = "".join(p.read_text(errors="replace") for p in outputs if p.exists())
    assert "refused" in said  # the refusals are logged, so this looks at the right files
    assert SECRET not in said and CANARY not in said


def test_a_taken_port_is_a_clear_error(served: Served) -> None:
    from lakesync.lakehouse.sql_server import SqlServerError

    with pytest.raises(SqlServerError, match=f"127.0.0.1:{served.port}.*in use.*--port"):
        SqlServer(served.settings, port=served.port).start()
