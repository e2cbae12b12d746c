"""The first-hour examples, each run as a user would: the todo app (sync, watch, asyncio) and
the analyst's notebook against a real gateway process; with Spark, the data-engineering
configuration shipping the same todos to PostgreSQL and MariaDB."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pymysql
import pytest

from lakesync.destinations.factory import mysql_params
from tests.destinations.conftest import MYSQL_DSN, require_mysql
from tests.gateway_process import ROOT, ServerProcess

pytestmark = [pytest.mark.slow]

EXAMPLES = ROOT / "examples"
GATEWAY = "todos_app"


def _run(script: Path, env: dict[str, str]) -> dict[str, Any]:
    """Run an example as its user would; what it printed (JSON)."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    full.pop("LAKESYNC_CONFIG", None)
    done = subprocess.run([sys.executable, str(script)], env=full, capture_output=True,
                          text=True, timeout=180, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def _todo_app(gw: ServerProcess, tmp_path: Path, user: str) -> dict[str, Any]:
    replicas = tmp_path / user
    replicas.mkdir()
    env = {"LAKESYNC_URL": gw.url, "LAKESYNC_JWT_SECRET": gw.secret, "APP_USER": user,
           "TODO_DIR": str(replicas)}
    return _run(EXAMPLES / "todo_app" / "app.py", env)


def _flush(gw: ServerProcess) -> None:
    headers = {"Authorization": f"Bearer {gw.token('ops', GATEWAY, role='admin')}"}
    r = httpx.post(f"{gw.url}/v1/admin/flush/{GATEWAY}", headers=headers, timeout=120)
    assert r.status_code == 200 and r.json()["flushed"], r.text


def test_the_todo_app_and_the_analysts_notebook(tmp_path: Path) -> None:
    config = EXAMPLES / "todo_app" / "lakesync.yaml"
    # Flushes only when asked: the notebook then reads bob's todos from the hot log alone.
    with ServerProcess(tmp_path / "gw", env={"LAKESYNC_FLUSH_INTERVAL": "0"}, config=config) as gw:
        alice = _todo_app(gw, tmp_path, "alice")
        both = [{"row_id": "alice:bread", "title": "Bread", "done": False},
                {"row_id": "alice:milk", "title": "Milk", "done": True}]
        assert alice["laptop"] == both and alice["phone"] == both
        # The laptop's watch saw its own write, then the phone's two changes by its sync.
        assert alice["watched"] == ["local insert alice:milk", "remote update alice:milk",
                                    "remote insert alice:bread"]
        _flush(gw)  # alice's changes land in the lake
        bob = _todo_app(gw, tmp_path, "bob")  # the rules: bob sees his own todos only
        assert [r["row_id"] for r in bob["laptop"]] == ["bob:bread", "bob:milk"]
        notebook = _run(EXAMPLES / "analyst" / "notebook.py",
                        {"LAKESYNC_DATA_DIR": str(gw.data_dir)})
    writers = {a["client_id"]: 0 for a in notebook["activity"]}
    for a in notebook["activity"]:
        writers[a["client_id"]] += a["changes"]
    assert writers == {"alice-laptop": 1, "alice-phone": 2}  # landed; bob's are not yet
    assert notebook["todos"] == [{"owner": "alice", "todos": 2, "done": 1},
                                 {"owner": "bob", "todos": 2, "done": 1}]


@pytest.fixture
def mysql_url() -> Iterator[str]:
    require_mysql()
    db = f"t_{uuid.uuid4().hex[:12]}"
    conn = pymysql.connect(**mysql_params(MYSQL_DSN))  # type: ignore[arg-type]
    with conn.cursor() as cur:
        cur.execute(f"create database `{db}`")
    yield urlunsplit(urlsplit(MYSQL_DSN)._replace(path=f"/{db}"))
    with conn.cursor() as cur:
        cur.execute(f"drop database `{db}`")
    conn.close()


@pytest.mark.spark
@pytest.mark.dbt
@pytest.mark.postgres
@pytest.mark.mysql
def test_the_data_engineering_config_ships_to_postgres_and_mariadb(
    tmp_path: Path, pg_url: str, mysql_url: str
) -> None:
    """The gateway's scheduled pipeline ships the todos to both databases, and `lakesync status`
    shows the run, each destination's last shipment and no lag, and exits 0."""
    config = EXAMPLES / "data_engineering" / "lakesync.yaml"
    env = {"REPORTING_DB_URL": pg_url, "SERVICE_DB_URL": mysql_url,
           "LAKESYNC_FLUSH_INTERVAL": "1", "LAKESYNC_PIPELINE_INTERVAL": "2"}
    with ServerProcess(tmp_path / "gw", env=env, config=config) as gw:
        _todo_app(gw, tmp_path, "alice")
        headers = {"Authorization": f"Bearer {gw.token('ops', GATEWAY, role='admin')}"}
        deadline = time.monotonic() + 900
        while True:
            status = httpx.get(f"{gw.url}/v1/admin/status", headers=headers, timeout=60).json()
            (todos,) = status["gateways"]
            dests = {d["name"]: d for d in todos["destinations"]}
            if (todos["pipeline"]["runs"] and all(
                d["last_shipment_at"] and d["tables"] and not d["lag"]["deltas"]
                for d in dests.values()
            )):
                break
            assert time.monotonic() < deadline, status
            time.sleep(3)
        assert status["failing"] == [] and todos["pipeline"]["runs"][0]["ok"]
        assert todos["pipeline"]["freshness_s"] is not None
        cli_env = {**os.environ, "PYTHONPATH": str(ROOT), "LAKESYNC_JWT_SECRET": gw.secret}
        done = subprocess.run(
            [sys.executable, "-m", "lakesync.cli.main", "status", "--url", gw.url, "--json"],
            env=cli_env, capture_output=True, text=True, timeout=120, check=False,
        )
        assert done.returncode == 0, done.stderr
    expected = [("alice:bread", "Bread", False, "alice"), ("alice:milk", "Milk", True, "alice")]
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("select row_id, title, done, owner from todos order by row_id")
        assert rows.fetchall() == expected
    conn2 = pymysql.connect(**mysql_params(mysql_url))  # type: ignore[arg-type]
    with conn2.cursor() as cur:
        cur.execute("select row_id, title, done, owner from todos order by row_id")
        assert [(r, t, bool(d), o) for r, t, d, o in cur.fetchall()] == expected
    conn2.close()
