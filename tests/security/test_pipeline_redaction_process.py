"""Secrets in a destination's URL by the outputs of a pipeline run: ``lakesync pipeline run``'s
stderr, handed to a real gateway's warm worker and run ``--in-process``, the worker's
``pipeline.log`` and ``GET /v1/admin/status?all=true`` afterwards. One destination holds its
password in the query string (``postgresql://u:pw@host/db?password=…``), one is a ``${VAR}``
whose value is a libpq key=value DSN (``password=…``, and a secret ``application_name`` where
no pattern looks). Both point at the real test PostgreSQL as a role that does not exist, so the
server refuses them and their errors are shown; a first run as a real role ships, so the lake
has its change sets (as in tests/lakehouse/test_materialise.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.api.helpers import SECRET, auth, delta, token
from tests.gateway_process import ROOT, ServerProcess
from tests.wire_json import as_json

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SECRETS = {
    "query": "Query-Pipeline-S3cret",
    "keyvalue": "KeyValue-Pipeline-S3cret",
    "env": "FromEnv-Pipeline-S3cret",
}
ENV_VAR = "LAKESYNC_TEST_WAREHOUSE_DSN"


def _leaks(text: str) -> list[str]:
    return [name for name, secret in SECRETS.items() if secret in text]


def _write_config(path: Path, pg_url: str, role: str) -> None:
    """``lakesync.yaml`` with the two destinations connecting as ``role``."""
    parts = urlsplit(pg_url)
    config = {
        "gateways": {"gw1": {"schemas": [
            {"table": "orders", "columns": [{"name": "total", "type": "number"}]}
        ]}},
        "destinations": {
            "d_query": {"kind": "postgres", "gateway": "gw1",
                        "url": f"postgresql://{role}:pw@{parts.hostname}:{parts.port}"
                               f"{parts.path}?password={SECRETS['query']}"},
            "d_env": {"kind": "postgres", "gateway": "gw1", "url": f"${{{ENV_VAR}}}"},
        },
        "server": {"flush_interval": 0, "pipeline_interval": 86400},
    }
    path.write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML


def _pipeline_run(config: Path, data: Path, env: dict[str, str], *args: str) -> str:
    """``lakesync pipeline run`` (the destinations fail: exit 1); its stdout and stderr."""
    run_env = {**os.environ, "PYTHONPATH": str(ROOT), "LAKESYNC_JWT_SECRET": SECRET, **env}
    run_env.pop("LAKESYNC_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "lakesync.cli.main", "pipeline", "run", "--no-tests",
         "--config", str(config), "--data-dir", str(data), *args],
        capture_output=True, env=run_env, timeout=900, check=False, text=True, cwd=config.parent,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 1, said[-3000:]
    assert "d_env/" in done.stderr, said[-3000:]
    return said


def test_a_failed_shipment_shows_no_secret_in_any_output(tmp_path: Path, pg_url: str) -> None:
    parts = urlsplit(pg_url)
    env = {ENV_VAR: f"host={parts.hostname} port={parts.port} user=no_such_role "
                    f"password={SECRETS['keyvalue']} application_name={SECRETS['env']} "
                    f"dbname={parts.path.lstrip('/')}"}
    config = tmp_path / "lakesync.yaml"
    _write_config(config, pg_url, role=parts.username or "postgres")
    data = tmp_path / "data"
    admin = auth(token("ops", role="admin"))
    with ServerProcess(data, env=env, config=config) as gw, \
            httpx.Client(base_url=gw.url, timeout=120) as http:
        rows = [delta("INSERT", "o1", "alice", table="orders", total=3)]
        r = http.post("/v1/sync/gw1/push", headers=auth(token("alice")),
                      json={"clientId": "alice", "deltas": [as_json(d) for d in rows]})
        assert r.status_code == 200, r.text
        assert http.post("/v1/admin/flush/gw1", headers=admin).status_code == 200
        first = _pipeline_run(config, data, env)  # d_query ships; d_env is refused
        assert "d_query/" not in first, first[-3000:]

        _write_config(config, pg_url, role="no_such_role")  # every run reads it again
        outputs = {"pipeline run, first": first,
                   "pipeline run on the gateway": _pipeline_run(config, data, env)}
        assert "d_query/" in outputs["pipeline run on the gateway"]
        outputs["pipeline.log"] = (data / "pipeline.log").read_text(errors="replace")
        status = http.get("/v1/admin/status", params={"all": "true"}, headers=admin)
        assert status.status_code == 200, status.text
        failing = " ".join(status.json()["failing"])
        assert "destination d_query" in failing and "destination d_env" in failing, failing
        outputs["GET /v1/admin/status?all=true"] = status.text
    outputs["pipeline run --in-process"] = _pipeline_run(config, data, env, "--in-process")

    assert "password=***" in outputs["pipeline run on the gateway"]
    assert "no_such_role" in outputs["pipeline.log"]  # the refusal is logged, masked
    leaked = {name: _leaks(text) for name, text in outputs.items() if _leaks(text)}
    assert not leaked, {name: outputs[name][-3000:] for name in leaked}
