"""``lakesync status`` against a real gateway process: a stopped destination makes it exit 1
and name the destination (``--json`` and the tables); a healthy gateway exits 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gateway_process import ROOT, SECRET, ServerProcess, free_port

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CONFIG = """
gateways:
  shop:
    schemas:
      - table: orders
        columns: [{{name: total, type: number}}]
destinations:
  warehouse:
    kind: postgres
    url: "{live}"
    gateway: shop
  archive:
    kind: postgres
    url: "{stopped}"
    gateway: shop
    tables: [orders]
server:
  flush_interval: 0
"""


def _status(gw: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAKESYNC_JWT_SECRET": SECRET}
    env.pop("LAKESYNC_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "lakesync.cli.main", "status", "--url", gw.url, *args],
        capture_output=True, env=env, timeout=120, check=False, text=True,
    )


def test_status_exits_1_naming_a_stopped_destination(tmp_path: Path, pg_url: str) -> None:
    stopped = f"postgresql://postgres@127.0.0.1:{free_port()}/archive"  # nothing listens there
    config = tmp_path / "lakesync.yaml"
    config.write_text(CONFIG.format(live=pg_url, stopped=stopped))
    with ServerProcess(tmp_path / "data", config=config) as gw:
        done = _status(gw, "--json")
        assert done.returncode == 1, done.stderr
        body = json.loads(done.stdout)
        assert [g["gateway"] for g in body["gateways"]] == ["shop"]
        (failing,) = body["failing"]
        assert failing.startswith("shop: destination archive unreachable")
        assert "failing: shop: destination archive unreachable" in done.stderr
        dests = {d["name"]: d for d in body["gateways"][0]["destinations"]}
        assert dests["warehouse"]["error"] is None and dests["archive"]["error"]

        tables = _status(gw, "--gw", "shop")  # the tables, piped: whole
        assert tables.returncode == 1
        assert "archive" in tables.stdout and "warehouse" in tables.stdout
        assert "failing: shop: destination archive unreachable" in tables.stderr


def test_status_of_a_healthy_gateway_exits_0(tmp_path: Path, pg_url: str) -> None:
    config = tmp_path / "lakesync.yaml"
    text = CONFIG.format(live=pg_url, stopped=pg_url).replace("archive", "mirror")
    config.write_text(text)
    with ServerProcess(tmp_path / "data", config=config) as gw:
        done = _status(gw)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "all well" in done.stdout and "mirror" in done.stdout
        typo = _status(gw, "--gw", "shopp")
        assert typo.returncode == 2 and "knows no gateway 'shopp'" in typo.stderr
