"""The first hour, as a new user spends it: the journey from the wheel installed in a fresh venv
outside the repository (``lakesync init``, the docs' quickstart, a pipeline run, ``lakesync
query``, the console) as one test; then the first-hour examples, each run as a user would: the
todo app (sync, watch, asyncio) and the analyst's notebook against a real gateway process; with
Spark, the data-engineering configuration shipping the same todos to PostgreSQL and MariaDB."""

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
from tests.gateway_process import ROOT, ServerProcess, free_port
from tests.netns import wait_for
from tests.quickstart import documented_quickstart

pytestmark = [pytest.mark.slow]

EXAMPLES = ROOT / "examples"
GATEWAY = "todos_app"


class Terminal:
    """A user's shell in ``cwd``: only the venv's commands on top of the system's, no
    ``PYTHONPATH`` and no ``LAKESYNC_*`` variable but those the user exported."""

    def __init__(self, venv: Path, cwd: Path) -> None:
        self.cwd = cwd
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("LAKESYNC_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        self.env["PATH"] = f"{venv / 'bin'}{os.pathsep}{self.env['PATH']}"

    def run(self, *args: str, timeout: float = 120) -> str:
        """Run a command; its stdout (it must exit 0)."""
        done = subprocess.run(list(args), cwd=self.cwd, env=self.env, capture_output=True,
                              text=True, timeout=timeout, check=False)
        assert done.returncode == 0, f"{args}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done.stdout


@pytest.mark.spark
@pytest.mark.dbt
def test_the_first_hour_from_the_wheel(wheel_venv: Path, tmp_path: Path) -> None:
    """``lakesync init`` in an empty folder; the gateway it configures; the quickstart snippet
    as the docs show it; a pipeline run (handed to the gateway's worker); ``lakesync query``
    reading the merged table; the console's page, sign-in with ``lakesync token --role admin``
    and the admin data it reads."""
    user = Terminal(wheel_venv, tmp_path / "project")
    user.cwd.mkdir()
    assert "wrote lakesync.yaml" in user.run("lakesync", "init")
    # set -a; . ./.env; set +a
    for line in (user.cwd / ".env").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            user.env[name] = value
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "up.log").open("wb")
    up = subprocess.Popen(["lakesync", "up", "--port", str(port)], cwd=user.cwd, env=user.env,
                          stdout=log, stderr=subprocess.STDOUT)
    try:
        def healthy() -> bool:
            assert up.poll() is None, (tmp_path / "up.log").read_text()[-3000:]
            try:
                return httpx.get(f"{url}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for("lakesync up to answer", healthy)
        # The quickstart, as the docs show it (only the port differs).
        _, snippet = documented_quickstart()
        user.env["LAKESYNC_TOKEN"] = user.run("lakesync", "token", "--sub", "alice",
                                              "--gw", "app").strip()
        printed = user.run("python", "-c", snippet.replace("http://127.0.0.1:8787", url))
        row = {"row_id": "row-1", "title": "Buy milk", "done": True, "owner": "alice"}
        assert printed.splitlines()[-1] == str([row])

        user.run("lakesync", "pipeline", "run", timeout=900)
        found = json.loads(user.run(
            "lakesync", "query", "--format", "json",
            "select row_id, title, done, owner from analytics.todos",
        ).splitlines()[0])
        assert found == row

        # The console: its page, then the sign-in its page makes with the token its hint
        # names, then the admin data it reads with the session cookie.
        admin = user.run("lakesync", "token", "--role", "admin", "--gw", "app").strip()
        with httpx.Client(base_url=url, timeout=60) as browser:
            page = browser.get("/console/")
            assert page.status_code == 200 and "lakesync token --role admin" in page.text
            signed = browser.post("/console/session", json={"token": admin},
                                  headers={"Origin": url, "Sec-Fetch-Site": "same-origin"})
            assert signed.status_code == 204, signed.text
            status = browser.get("/console/api/status")
            assert status.status_code == 200, status.text
            assert status.json()["failing"] == []
            app = browser.get("/console/api/gateways/app")
            assert app.status_code == 200, app.text
            assert "todos" in app.text
    finally:
        up.terminate()
        up.wait(timeout=120)
        log.close()


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
