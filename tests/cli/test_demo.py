"""The README's main job (`lakesync demo`) runs end to end and prints the merged lake table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.dbt
def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    env = {**os.environ, "LAKESYNC_JWT_SECRET": "demo-test-secret-0123456789abcdef0123"}
    done = subprocess.run(
        [sys.executable, "-m", "cli", "demo", "--data-dir", str(tmp_path / "d")],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # Spark's log lines and stage bars go to the data dir's log file, not the terminal.
    for noise in (" WARN ", "[Stage ", "setLogLevel"):
        assert noise not in done.stderr, done.stderr[-3000:]
    assert " WARN " in (tmp_path / "d" / "spark.log").read_text()
    out = done.stdout
    assert "replicas converged" in out
    assert "'flushed': True" in out
    # Both offline edits of row 1 survive in the lake (title by alice, done by bob); row 3 is gone.
    lake = out.split("analytics.todos, read with DuckDB")[1]
    assert "Buy oat milk" in lake and "True" in lake
    assert "Walk dog" in lake
    assert "Call mum" not in lake
