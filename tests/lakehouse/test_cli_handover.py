"""``lakesync pipeline run``, ``materialise`` and ``compact`` hand their work to the warm worker
of the data dir's ``lakesync up``, and run in their own process without it.

Real parts: a gateway process with its pipeline worker (Spark + dbt), the CLI as a subprocess, a
PostgreSQL destination. The CLI process is given a ``JAVA_HOME`` with no Java: it cannot start a
JVM, so a run that succeeds there ran on the gateway's worker (which the gateway records in its
status). A table whose model fails fails the command alike both ways: same exit code, same
message.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pyarrow as pa
import pytest
import yaml

from lakesync.api.datadir import GATEWAY_FILE
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.settings import LakeSettings
from tests.api.helpers import SECRET, Gateway, delta, token
from tests.conftest import drop_pg_database, fresh_pg_database
from tests.gateway_process import ROOT, ServerProcess

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

NOTES = {"table": "notes", "columns": [{"name": "body", "type": "string"}]}
BROKEN = {"table": "broken", "columns": [{"name": "title", "type": "string"}]}


@pytest.fixture
def dest_url() -> Iterator[str]:
    url = fresh_pg_database()
    yield url
    drop_pg_database(url)


def _cli(*args: str, cwd: Path, java: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
    """``lakesync ARGS`` in a new process (output piped: no terminal); without ``java`` it
    cannot start a JVM."""
    full = {**os.environ, "LAKESYNC_JWT_SECRET": SECRET, "PYTHONPATH": str(ROOT), **env}
    full.pop("LAKESYNC_CONFIG", None)
    if not java:
        full["JAVA_HOME"] = str(cwd / "no-java")
    return subprocess.run([sys.executable, "-m", "lakesync.cli", *args], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=900, check=False)


def _error_line(stderr: str) -> str:
    """The one ``error:`` line, Spark's expression ids in dbt's message (``x#648``) left out:
    each session numbers its own."""
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, stderr
    return re.sub(r"#\d+", "#", lines[0])


def _runs(server: ServerProcess) -> list[dict[str, Any]]:
    admin = {"Authorization": f"Bearer {server.token('ops', 'gw1', role='admin')}"}
    r = httpx.get(f"{server.url}/v1/admin/status/gw1", headers=admin, timeout=60)
    assert r.status_code == 200, r.text
    runs: list[dict[str, Any]] = r.json()["gateways"][0]["pipeline"]["runs"]
    return runs


@pytest.mark.timeout(1800)  # two JVMs' starts and a compaction, on a loaded machine
def test_the_commands_use_the_gateways_warm_worker_and_run_here_without_it(
    tmp_path: Path, dest_url: str
) -> None:
    data = tmp_path / "data"
    config = tmp_path / "lakesync.yaml"
    config.write_text(yaml.safe_dump({
        "gateways": {"gw1": {"schemas": [NOTES, BROKEN]}},
        "destinations": {"pg": {"kind": "postgres", "url": "${LAKESYNC_TEST_DEST_URL}",
                                "gateway": "gw1", "tables": ["notes"]}},
    }), encoding="utf-8")
    env = {"LAKESYNC_TEST_DEST_URL": dest_url}
    common = ("--config", str(config), "--data-dir", str(data))
    with ServerProcess(data, env=env, config=config) as server:
        assert (data / GATEWAY_FILE).is_file()
        with httpx.Client(base_url=server.url, timeout=60) as http:
            pushed = Gateway(http).push(token("alice"), "alice", [
                delta("INSERT", "n1", "alice", table="notes", body="one"),
                delta("INSERT", "n2", "alice", table="notes", body="two"),
                delta("INSERT", "b1", "alice", table="broken", title="b"),
            ])
            assert pushed.status_code == 200, pushed.text
            admin = {"Authorization": f"Bearer {server.token('ops', 'gw1', role='admin')}"}
            flushed = http.post("/v1/admin/flush/gw1", headers=admin)
            assert flushed.status_code == 200, flushed.text
        # `analytics.broken` exists in another shape: its incremental model fails in dbt.
        catalog = open_catalog(LakeSettings.from_env(data, env={}))
        catalog.create_namespace_if_not_exists("analytics")
        catalog.create_table("analytics.broken", pa.schema([pa.field("x", pa.int32())]))

        handed = _cli("pipeline", "run", *common, cwd=tmp_path, java=False, **env)

        assert handed.returncode == 1, handed.stderr
        assert "rows merged" in handed.stdout and "notes" in handed.stdout  # the summary table
        summary = [line for line in handed.stderr.splitlines() if line.startswith("pipeline run:")]
        assert len(summary) == 1 and "1 failed" in summary[0], handed.stderr
        error = _error_line(handed.stderr)
        assert "table broken not built" in error and "analytics__broken" in error
        run = _runs(server)[0]  # the gateway's worker ran it, and recorded it
        assert (run["ok"], run["rows_merged"], run["rows_shipped"]) == (False, 3, 2), run
        with psycopg.connect(dest_url) as conn:
            assert conn.execute("select row_id, body from notes order by 1").fetchall() == [
                ("n1", "one"), ("n2", "two")]

        shipped = _cli("materialise", *common, cwd=tmp_path, java=False, **env)
        assert shipped.returncode == 0, shipped.stderr
        assert "materialise: 1 tables, 0 rows shipped" in shipped.stderr  # one summary line
        assert "notes" in shipped.stdout  # the shipments table

        compacted = _cli("compact", *common, cwd=tmp_path, java=False, **env)
        assert compacted.returncode == 0, compacted.stderr
        assert "lakesync.landing:" in compacted.stdout
        assert "tables maintained in" in compacted.stdout
    assert not (data / GATEWAY_FILE).exists()  # gone with the gateway

    # No gateway: the same command runs here, and fails the same way.
    alone = _cli("pipeline", "run", *common, cwd=tmp_path, **env)
    assert alone.returncode == handed.returncode, alone.stderr
    assert _error_line(alone.stderr) == error
