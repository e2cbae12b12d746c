"""A pipeline run made without a running gateway (``lakesync pipeline run`` in its own process)
is recorded in the hot log's status history like the gateway's own runs, with its shipments,
and so are ``lakesync materialise``'s shipments: ``lakesync status`` shows them once a gateway
serves the data dir again (not "last pipeline run: none" while the models hold the data).

Real parts: a gateway process to land a row, the CLI as a subprocess running dbt on Spark and
shipping to a PostgreSQL destination, a second gateway process on the same data dir,
``lakesync status`` against it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.api.helpers import SECRET, Gateway, delta, token
from tests.conftest import drop_pg_database, fresh_pg_database
from tests.gateway_process import ROOT, ServerProcess

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow, pytest.mark.postgres]

NOTES = {"table": "notes", "columns": [{"name": "body", "type": "string"}]}


@pytest.fixture
def dest_url() -> Iterator[str]:
    url = fresh_pg_database()
    yield url
    drop_pg_database(url)


def _cli(*args: str, cwd: Path, dest_url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LAKESYNC_JWT_SECRET": SECRET, "PYTHONPATH": str(ROOT),
           "LAKESYNC_TEST_DEST_URL": dest_url}
    env.pop("LAKESYNC_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "lakesync.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900, check=False)


@pytest.mark.timeout(1200)
def test_a_pipeline_run_without_a_gateway_shows_in_status(tmp_path: Path, dest_url: str) -> None:
    data = tmp_path / "data"
    config = tmp_path / "lakesync.yaml"
    config.write_text(yaml.safe_dump({
        "gateways": {"gw1": {"schemas": [NOTES]}},
        "destinations": {"pg": {"kind": "postgres", "url": "${LAKESYNC_TEST_DEST_URL}",
                                "gateway": "gw1", "tables": ["notes"]}},
        "server": {"flush_interval": 0, "pipeline_interval": 0},
    }), encoding="utf-8")
    env = {"LAKESYNC_TEST_DEST_URL": dest_url}
    with ServerProcess(data, env=env, config=config) as server, \
            httpx.Client(base_url=server.url, timeout=60) as http:
        pushed = Gateway(http).push(token("alice"), "alice", [
            delta("INSERT", "n1", "alice", table="notes", body="one"),
        ])
        assert pushed.status_code == 200, pushed.text
        admin = {"Authorization": f"Bearer {server.token('ops', 'gw1', role='admin')}"}
        flushed = http.post("/v1/admin/flush/gw1", headers=admin)
        assert flushed.status_code == 200, flushed.text

    common = ("--config", str(config), "--data-dir", str(data))
    ran = _cli("pipeline", "run", "--no-tests", *common, cwd=tmp_path, dest_url=dest_url)
    assert ran.returncode == 0, ran.stderr
    assert "not recorded" not in ran.stderr

    with ServerProcess(data, env=env, config=config) as server:
        status = _status(server, common, tmp_path, dest_url)
        (run,) = status["pipeline"]["runs"]
        assert (run["ok"], run["rows_merged"], run["rows_shipped"]) == (True, 1, 1), run
        (pg,) = status["destinations"]
        assert pg["last_rows"] == 1 and pg["last_shipment_at"] is not None, pg
        text = _cli("status", "--url", server.url, "--gw", "gw1", *common[:2], cwd=tmp_path,
                    dest_url=dest_url)
        (line,) = [x for x in text.stdout.splitlines() if "last pipeline run" in x]
        assert "ok" in line and "1 merged" in line, text.stdout

    # materialise without a gateway: nothing new to ship, and its shipment recorded
    shipped = _cli("materialise", *common, cwd=tmp_path, dest_url=dest_url)
    assert shipped.returncode == 0, shipped.stderr
    with ServerProcess(data, env=env, config=config) as server:
        (after,) = _status(server, common, tmp_path, dest_url)["destinations"]
        assert after["last_rows"] == 0 and after["last_shipment_at"] > pg["last_shipment_at"]


def _status(server: ServerProcess, common: tuple[str, ...], cwd: Path,
            dest_url: str) -> dict[str, Any]:
    """``lakesync status --json``'s gateway gw1."""
    done = _cli("status", "--url", server.url, "--gw", "gw1", "--json", *common[:2], cwd=cwd,
                dest_url=dest_url)
    assert done.returncode == 0, done.stdout + done.stderr
    gateway: dict[str, Any] = json.loads(done.stdout)["gateways"][0]
    return gateway
