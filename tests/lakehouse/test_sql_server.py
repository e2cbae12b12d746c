"""Issue 26: `lakesync sql-server` serves the lake over HiveServer2 to PyHive, beeline and dbt.

The lake is built by the real pipeline (two runs, so `analytics.todos` has an earlier snapshot
to travel to); the in-process Spark session is then stopped, and the Thrift server runs as its
own JVM, started by the CLI command as a user starts it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lakesync.delta import RowDelta
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.runner import run_pipeline
from lakesync.lakehouse.settings import LakeSettings
from lakesync.lakehouse.sql_server import SqlServer
from lakesync.schema import parse_schema

from .conftest import Lake

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TODOS = parse_schema({"table": "todos", "columns": [{"name": "title", "type": "string"}]})
GW = "gw1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Served:
    settings: LakeSettings
    port: int
    first_snapshot: int  # analytics.todos after the first run: only r1


@pytest.fixture(scope="module")
def served(lake: Lake) -> Iterator[Served]:
    lake.land(GW, [RowDelta.create("INSERT", "todos", "r1", "c1", {"title": "one"}, 10)])
    run_pipeline(settings=lake.settings, schemas=[TODOS], tests=False)
    todos = open_catalog(lake.settings).load_table("analytics.todos")
    snap = todos.current_snapshot()
    assert snap is not None
    lake.land(GW, [RowDelta.create("INSERT", "todos", "r2", "c1", {"title": "two"}, 11)])
    run_pipeline(settings=lake.settings, schemas=[TODOS], tests=False)
    lake.spark.stop()  # one JVM at a time on a 2-core machine
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "lakesync.cli", "sql-server", "--data-dir",
         str(lake.settings.data_dir), "--port", str(port)],
        env=env, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stderr is not None
    said = []
    for line in proc.stderr:  # the CLI says when it serves, or why it could not
        said.append(line)
        if "serving the lake at" in line:
            break
    else:
        pytest.fail(f"sql-server exited {proc.wait()}: {''.join(said)}")
    assert f"jdbc:hive2://127.0.0.1:{port}/default" in said[-1]
    yield Served(lake.settings, port, snap.snapshot_id)
    proc.terminate()  # a service manager's stop: the CLI stops the Thrift server and exits
    assert proc.wait(60) == 0
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def _pyhive(served: Served, sql: str) -> list[tuple[object, ...]]:
    from pyhive import hive

    with hive.connect("127.0.0.1", served.port, username="analyst", auth="NONE") as con:
        cur = con.cursor()
        cur.execute(sql)
        return list(cur.fetchall())


def test_pyhive_queries_the_analytics_table(served: Served) -> None:
    sql = f"select row_id, title from analytics.todos where gateway_id = '{GW}' order by row_id"
    assert _pyhive(served, sql) == [("r1", "one"), ("r2", "two")]


def test_pyhive_queries_a_time_travel_snapshot(served: Served) -> None:
    sql = (f"select row_id from analytics.todos version as of {served.first_snapshot} "
           f"where gateway_id = '{GW}'")
    assert _pyhive(served, sql) == [("r1",)]


def test_beeline_queries_the_analytics_table(served: Served) -> None:
    import pyspark

    beeline = Path(pyspark.__file__).parent / "bin" / "beeline"
    out = subprocess.run(
        [str(beeline), "-u", f"jdbc:hive2://127.0.0.1:{served.port}/default", "-n", "analyst",
         "--silent=true", "--outputformat=csv2", "-e",
         f"select title from analytics.todos where gateway_id = '{GW}' order by title"],
        check=False, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    # beeline echoes its prompt (`0: jdbc:hive2://…>`) before the csv2 result.
    assert out.stdout.split()[-3:] == ["title", "one", "two"]


def test_dbt_thrift_target_runs_against_it(served: Served, tmp_path: Path) -> None:
    # The profiles.yml `thrift` target, as a dbt user runs it next to the server.
    env = {**os.environ, **served.settings.dbt_env(), "LAKESYNC_SQL_PORT": str(served.port)}
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


def test_a_taken_port_is_a_clear_error(served: Served) -> None:
    from lakesync.lakehouse.sql_server import SqlServerError

    with pytest.raises(SqlServerError, match=f"127.0.0.1:{served.port}.*in use.*--port"):
        SqlServer(served.settings, port=served.port).start()
