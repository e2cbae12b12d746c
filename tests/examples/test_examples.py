"""The agent flows of ``examples/``, end to end: a real gateway process runs each example's
``lakesync.yaml`` (its connector polls a local server: moto's CloudWatch Logs, the BigQuery
emulator), each principal runs the example's program with its own token, and ``lakesync pipeline
run --config`` ships what they wrote to PostgreSQL. Asserts what each principal's rules let it
see and what reaches PostgreSQL."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.gateway_process import ROOT, ServerProcess

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

EXAMPLES = ROOT / "examples"


def _env(extra: dict[str, str]) -> dict[str, str]:
    # The worktree's lakesync, whatever the venv's editable install points at.
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def wait_for_rows(gw: ServerProcess, gateway: str, connector: str, rows: int) -> None:
    """Until the connector's first poll in this process stored ``rows`` deltas."""
    headers = {"Authorization": f"Bearer {gw.token('ops-admin', gateway, role='admin')}"}
    url = f"{gw.url}/v1/admin/connectors/{gateway}/{connector}/status"
    deadline = time.monotonic() + 180
    while True:
        status = httpx.get(url, headers=headers, timeout=10).json()
        if status.get("deltas_pushed", 0) >= rows and status["state"] != "polling":
            assert status["last_error"] is None, status
            return
        assert time.monotonic() < deadline, status
        time.sleep(0.5)


def run_program(
    script: Path, gw: ServerProcess, gateway: str, sub: str, claims: dict[str, str], replica: Path
) -> list[dict[str, Any]]:
    """Run an example's program as its principal would; what it printed (JSON)."""
    token = gw.token(sub, gateway, claims=claims)
    env = {"LAKESYNC_URL": gw.url, "LAKESYNC_TOKEN": token}
    env |= {"AGENT_REPLICA": str(replica), "DASHBOARD_REPLICA": str(replica)}
    done = subprocess.run(
        [sys.executable, str(script)], env=_env(env), capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    found: list[dict[str, Any]] = json.loads(done.stdout)
    return found


def ship(gw: ServerProcess, gateway: str, config: Path, env: dict[str, str]) -> None:
    """Flush the hot log into the lake, stop the gateway, run ``lakesync pipeline run``."""
    headers = {"Authorization": f"Bearer {gw.token('ops-admin', gateway, role='admin')}"}
    r = httpx.post(f"{gw.url}/v1/admin/flush/{gateway}", headers=headers, timeout=120)
    assert r.status_code == 200, r.text
    gw.stop()
    done = subprocess.run(
        [sys.executable, "-m", "lakesync.cli.main", "pipeline", "run", "--config", str(config),
         "--data-dir", str(gw.data_dir)],
        env=_env(env), cwd=ROOT, capture_output=True, timeout=900, check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]


def replica_rows(replica: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(replica) as conn:
        return conn.execute(sql).fetchall()


# -- (1) the logs agent ------------------------------------------------------------------------


def seed_logs(endpoint: str) -> None:
    """The example's seed step, run as its README shows."""
    env = {**os.environ, "LOGS_ENDPOINT": endpoint, "AWS_ACCESS_KEY_ID": "test",
           "AWS_SECRET_ACCESS_KEY": "test"}
    seeded = subprocess.run([sys.executable, str(EXAMPLES / "logs_agent" / "seed.py")], env=env,
                            capture_output=True, text=True, timeout=300, check=False)
    assert seeded.returncode == 0, seeded.stderr
    assert seeded.stdout.strip() == "9 events in log group /examples/shop"


def test_the_logs_agent_flow(tmp_path: Path, pg_url: str) -> None:
    from tests.connectors.conftest import require_cloudwatch

    endpoint = require_cloudwatch()
    seed_logs(endpoint)
    config = EXAMPLES / "logs_agent" / "lakesync.yaml"
    env = {"LOGS_ENDPOINT": endpoint, "AWS_ACCESS_KEY_ID": "test",
           "AWS_SECRET_ACCESS_KEY": "test", "FINDINGS_DB_URL": pg_url}
    script = EXAMPLES / "logs_agent" / "agent.py"
    with ServerProcess(tmp_path / "gw", env=env, config=config) as gw:
        wait_for_rows(gw, "ops", "shop_logs", 9)  # every event of the group reached the gateway
        api = run_program(script, gw, "ops", "agent-api", {"service": "shop-api"},
                          tmp_path / "api.db")
        billing = run_program(script, gw, "ops", "agent-billing", {"service": "shop-billing"},
                              tmp_path / "billing.db")
        # Each agent saw only the errors of its own service, and only its own findings.
        assert replica_rows(tmp_path / "api.db", "select distinct level, service from logs") == [
            ("ERROR", "shop-api")
        ]
        assert replica_rows(tmp_path / "api.db", "select count(*) from logs") == [(4,)]
        assert replica_rows(tmp_path / "billing.db", "select count(*) from logs") == [(2,)]
        assert [(f["row_id"], f["errors"]) for f in api] == [
            ("shop-api:/cart", 1), ("shop-api:/checkout", 3)
        ]
        assert [(f["row_id"], f["errors"], f["sample"]) for f in billing] == [
            ("shop-billing:/invoice", 2, "pdf render failed")
        ]
        ship(gw, "ops", config, env)
    with psycopg.connect(pg_url) as conn:
        shipped = conn.execute(
            "select row_id, service, path, errors, agent from findings order by row_id"
        ).fetchall()
    assert shipped == [
        ("shop-api:/cart", "shop-api", "/cart", 1, "agent-api"),
        ("shop-api:/checkout", "shop-api", "/checkout", 3, "agent-api"),
        ("shop-billing:/invoice", "shop-billing", "/invoice", 2, "agent-billing"),
    ]


# -- (2) the ledger dashboard ------------------------------------------------------------------


def seed_ledger(endpoint: str) -> str:
    from lakesync.connectors.bigquery import bigquery_client

    url = f"bigquery://test-project?endpoint={endpoint}"
    client = bigquery_client(url)
    client.query("DROP SCHEMA IF EXISTS examples_finance CASCADE").result()
    client.query("CREATE SCHEMA examples_finance").result()
    client.query(
        "CREATE TABLE examples_finance.ledger (id INT64, cost_centre STRING,"
        " amount NUMERIC(12, 2), booked_at TIMESTAMP, memo STRING)"
    ).result()
    client.query(
        "INSERT INTO examples_finance.ledger VALUES"
        " (1, 'ops', 120.50, TIMESTAMP '2026-01-05 10:00:00+00', 'servers'),"
        " (2, 'ops', 79.50, TIMESTAMP '2026-01-20 10:00:00+00', 'backups'),"
        " (3, 'sales', 1000.00, TIMESTAMP '2026-01-21 10:00:00+00', 'fair'),"
        " (4, 'ops', 300.25, TIMESTAMP '2026-02-02 09:00:00+00', 'servers'),"
        " (5, 'sales', 50.00, TIMESTAMP '2026-02-03 09:00:00+00', 'lunch')"
    ).result()
    client.close()
    return url


def test_the_ledger_dashboard_flow(tmp_path: Path, pg_url: str) -> None:
    from tests.destinations.conftest import BIGQUERY_ENDPOINT, require_bigquery

    require_bigquery()
    url = seed_ledger(BIGQUERY_ENDPOINT)
    config = EXAMPLES / "ledger_dashboard" / "lakesync.yaml"
    env = {"LEDGER_BIGQUERY_URL": url, "REPORTING_DB_URL": pg_url}
    script = EXAMPLES / "ledger_dashboard" / "dashboard.py"
    with ServerProcess(tmp_path / "gw", env=env, config=config) as gw:
        wait_for_rows(gw, "finance", "ledger", 5)
        ops = run_program(script, gw, "finance", "dana", {"cost_centre": "ops"},
                          tmp_path / "dana.db")
        # The rules gave dana the ops entries only.
        assert replica_rows(tmp_path / "dana.db", "select id from ledger order by id") == [
            (1,), (2,), (4,)
        ]
        assert [(m["row_id"], m["total"], m["entries"]) for m in ops] == [
            ("ops:2026-01", 200.0, 2), ("ops:2026-02", 300.25, 1)
        ]
        sales = run_program(script, gw, "finance", "sam", {"cost_centre": "sales"},
                            tmp_path / "sam.db")
        assert [m["row_id"] for m in sales] == ["sales:2026-01", "sales:2026-02"]
        ship(gw, "finance", config, env)
    with psycopg.connect(pg_url) as conn:
        shipped = conn.execute(
            "select row_id, cost_centre, month, total, entries from ledger_monthly order by row_id"
        ).fetchall()
    assert shipped == [
        ("ops:2026-01", "ops", "2026-01", 200, 2),
        ("ops:2026-02", "ops", "2026-02", 300.25, 1),
        ("sales:2026-01", "sales", "2026-01", 1000, 1),
        ("sales:2026-02", "sales", "2026-02", 50, 1),
    ]
