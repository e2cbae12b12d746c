"""``lakesync pipeline generate`` writes into the dbt project it is run in (or ``--project``)
and says where, never into the installed project behind the user's back. The real ``lakesync``
command in a subprocess, on a lake the gateway has flushed into (no Spark)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakesync.lakehouse.bootstrap import init_catalog_tables
from lakesync.lakehouse.catalog import ensure_landing_table, open_catalog
from lakesync.lakehouse.models import GENERATED
from lakesync.lakehouse.registry import publish_schemas
from lakesync.lakehouse.settings import LakeSettings, default_dbt_project_dir
from lakesync.schema import parse_schema

TABLE = "generate_probe_items"
SCHEMA = parse_schema({"table": TABLE, "columns": [{"name": "title", "type": "string"}]})
MODEL = Path("analytics", f"analytics__{TABLE}.sql")


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    settings = LakeSettings.from_env(tmp_path / "lake", env={})
    init_catalog_tables(settings)
    catalog = open_catalog(settings)
    ensure_landing_table(catalog)
    publish_schemas(catalog, [("gw1", SCHEMA)])
    return settings.data_dir


def _generate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "lakesync"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "lakesync.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESYNC_")}
    return subprocess.run(
        [*command, "pipeline", "generate", *args],
        cwd=cwd, capture_output=True, text=True, env=env, timeout=120, check=False,
    )


def _project(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "dbt_project.yml").write_text("name: copy\nmodel-paths: [models, generated]\n")
    return path


def test_generate_writes_into_the_project_it_is_run_in(lake: Path, tmp_path: Path) -> None:
    copy = _project(tmp_path / "copy")
    (copy / "models").mkdir()
    proc = _generate(copy / "models", "--data-dir", str(lake))  # from inside the project
    assert proc.returncode == 0, proc.stderr
    assert (copy / GENERATED / MODEL).is_file()
    assert f"into {copy / GENERATED}" in proc.stdout
    assert not (default_dbt_project_dir() / GENERATED / MODEL).exists()


def test_generate_into_the_project_given(lake: Path, tmp_path: Path) -> None:
    other = _project(tmp_path / "other")
    proc = _generate(tmp_path, "--data-dir", str(lake), "--project", str(other))
    assert proc.returncode == 0, proc.stderr
    assert (other / GENERATED / MODEL).is_file()
    assert f"into {other / GENERATED}" in proc.stdout
    assert not (default_dbt_project_dir() / GENERATED / MODEL).exists()


def test_a_project_without_dbt_project_yml_is_refused(lake: Path, tmp_path: Path) -> None:
    proc = _generate(tmp_path, "--data-dir", str(lake), "--project", str(tmp_path / "nope"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and "holds no dbt_project.yml" in proc.stderr
