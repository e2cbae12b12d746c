"""The architecture's layers (pyproject.toml ``[tool.importlinter]``) hold, and the check fails
on an upward import: a copy of the package with one added ``client -> api`` import is refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = [sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()"]


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        LINT, cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_layers_hold() -> None:
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "0 broken" in done.stdout


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    shutil.copytree(
        ROOT / "lakesync", tmp_path / "lakesync", symlinks=True,
        ignore=shutil.ignore_patterns("__pycache__", "dbt_project"),
    )
    types = tmp_path / "lakesync" / "client" / "_types.py"
    upward = "\nimport lakesync.api.app  # the client above the gateway\n"
    types.write_text(types.read_text() + upward)
    done = _lint(tmp_path)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "BROKEN" in done.stdout
    assert "lakesync.client._types -> lakesync.api.app" in done.stdout
