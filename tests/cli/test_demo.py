"""The README's main job (`lakesync demo`) runs end to end from the built wheel, installed in a new
venv and run in an empty directory: one import name, and the dbt project found in the package."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_the_wheel_installs_one_top_level_package(wheel_venv: Path, tmp_path: Path) -> None:
    shown = _run(wheel_venv / "bin" / "python", "-m", "pip", "show", "-f", "lakesync").stdout
    files = [line.strip() for line in shown.split("Files:")[1].splitlines() if line.strip()]
    tops = {f.split("/")[0] for f in files if not f.startswith("../")}
    assert tops == {"lakesync", "lakesync-0.1.0.dist-info"}, tops
    assert "lakesync/dbt_project/models/intermediate/int_cells_merged.sql" in files
    # Imported from the wheel, not the checkout, whatever the working directory.
    where = _run(wheel_venv / "bin" / "python", "-c",
                 "import lakesync.client, lakesync.lakehouse.settings as s;"
                 "print(lakesync.client.__file__); print(s.default_dbt_project_dir())",
                 cwd=tmp_path).stdout.split()
    assert all(str(wheel_venv) in w for w in where), where
    assert (Path(where[1]) / "dbt_project.yml").is_file()


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.dbt
def test_demo_runs_end_to_end_from_the_wheel(wheel_venv: Path, tmp_path: Path) -> None:
    work = tmp_path / "empty"
    work.mkdir()
    env = {**os.environ, "LAKESYNC_JWT_SECRET": "demo-test-secret-0123456789abcdef0123"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [wheel_venv / "bin" / "lakesync", "demo", "--data-dir", "d"],
        cwd=work,
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
    assert " WARN " in (work / "d" / "spark.log").read_text()
    out = done.stdout
    assert "replicas converged" in out
    assert "'flushed': True" in out
    # Both offline edits of row 1 survive in the lake (title by alice, done by bob); row 3 is gone.
    lake = out.split("analytics.todos, read with DuckDB")[1]
    assert "Buy oat milk" in lake and "True" in lake
    assert "Walk dog" in lake
    assert "Call mum" not in lake
    # Nothing was written into the installed package (generated models live in the data dir).
    assert not list((wheel_venv / "lib").rglob("dbt_project/generated"))
