"""A pipeline run made without a running gateway (``lakesync pipeline run`` in its own process)
is recorded in the hot log's status history like the gateway's own runs, so ``lakesync status``
shows it once a gateway serves the data dir again (not "last pipeline run: none" while the
models hold the data).

Real parts: a gateway process to land a row, the CLI as a subprocess running dbt on Spark, a
second gateway process on the same data dir, ``lakesync status`` against it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from tests.api.helpers import SECRET, Gateway, delta, token
from tests.gateway_process import ROOT, ServerProcess

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

NOTES = {"table": "notes", "columns": [{"name": "body", "type": "string"}]}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LAKESYNC_JWT_SECRET": SECRET, "PYTHONPATH": str(ROOT)}
    env.pop("LAKESYNC_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "lakesync.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900, check=False)


@pytest.mark.timeout(1200)
def test_a_pipeline_run_without_a_gateway_shows_in_status(tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = tmp_path / "lakesync.yaml"
    config.write_text(yaml.safe_dump({
        "gateways": {"gw1": {"schemas": [NOTES]}},
        "server": {"flush_interval": 0, "pipeline_interval": 0},
    }), encoding="utf-8")
    with ServerProcess(data, config=config) as server, \
            httpx.Client(base_url=server.url, timeout=60) as http:
        pushed = Gateway(http).push(token("alice"), "alice", [
            delta("INSERT", "n1", "alice", table="notes", body="one"),
        ])
        assert pushed.status_code == 200, pushed.text
        admin = {"Authorization": f"Bearer {server.token('ops', 'gw1', role='admin')}"}
        flushed = http.post("/v1/admin/flush/gw1", headers=admin)
        assert flushed.status_code == 200, flushed.text

    common = ("--config", str(config), "--data-dir", str(data))
    ran = _cli("pipeline", "run", "--no-tests", *common, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "not recorded" not in ran.stderr

    with ServerProcess(data, config=config) as server:
        as_json = _cli("status", "--url", server.url, "--gw", "gw1", "--json", *common[:2],
                       cwd=tmp_path)
        assert as_json.returncode == 0, as_json.stdout + as_json.stderr
        (run,) = json.loads(as_json.stdout)["gateways"][0]["pipeline"]["runs"]
        assert (run["ok"], run["rows_merged"]) == (True, 1), run
        text = _cli("status", "--url", server.url, "--gw", "gw1", *common[:2], cwd=tmp_path)
        (line,) = [x for x in text.stdout.splitlines() if "last pipeline run" in x]
        assert "ok" in line and "1 merged" in line, text.stdout
