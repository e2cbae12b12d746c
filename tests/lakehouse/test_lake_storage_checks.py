"""The lake's storage checked before use, each failure one readable line: ``lake.warehouse`` on
S3 with a REST catalog whose own warehouse is elsewhere (its tables would not be where the
configuration says), and a bucket that does not exist, for ``lakesync pipeline run`` and
``lakesync up`` alike; no Java or Python stack trace in an ``error:`` line."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from lakesync.lakehouse.bootstrap import check_storage
from lakesync.lakehouse.settings import LakeSettings
from tests.api.helpers import SECRET
from tests.conftest import fresh_s3_bucket, s3_client, s3_lake_env
from tests.gateway_process import ROOT, free_port
from tests.rest_catalog import rest_catalog_server, s3_catalog_env

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

TRACES = ("Traceback", "\tat ", "Py4JJavaError", 'File "')


def _cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``lakesync ARGS`` in a new process with ``env`` over a clean ``LAKESYNC_*``-less one;
    it must end by itself (a gateway that does not refuse to start fails the test)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("LAKESYNC_")}
    full |= {"LAKESYNC_JWT_SECRET": SECRET, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-m", "lakesync.cli", *args], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=600, check=False)


def _error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The command's one ``error:`` line: it failed, said so once, with no stack trace."""
    assert done.returncode != 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, done.stderr
    assert not any(t in done.stderr for t in TRACES), done.stderr
    assert len(lines[0]) < 800, lines[0]
    return lines[0]


def test_a_rest_catalog_keeping_its_tables_elsewhere_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    """A REST catalog whose warehouse is a local folder, ``lake.warehouse`` a bucket: the
    pipeline refuses before creating anything, saying which setting to change; with the same
    warehouse on both sides the check passes."""
    bucket = fresh_s3_bucket()
    with rest_catalog_server(tmp_path / "rest", None, {}) as uri:
        env = {**s3_lake_env(bucket), "LAKESYNC_CATALOG_URI": uri,
               "LAKESYNC_DATA_DIR": str(tmp_path / "data")}
        line = _error_line(_cli("pipeline", "run", cwd=tmp_path, env=env))
        assert f"lake.warehouse is s3://{bucket}/lake" in line and uri in line, line
        assert "set lake.warehouse" in line, line

    warehouse = f"s3://{bucket}/shared"
    with rest_catalog_server(tmp_path / "rest2", warehouse, s3_catalog_env()) as uri:
        env = {**s3_lake_env(bucket, "shared"), "LAKESYNC_CATALOG_URI": uri}
        check_storage(LakeSettings.from_env(tmp_path / "data2", env=env))  # no error


def test_a_missing_bucket_is_one_line_naming_it(tmp_path: Path) -> None:
    fresh_s3_bucket()  # skips (fails under CI) without the S3 server
    bucket = f"t-missing-{uuid.uuid4().hex[:8]}"
    env = {**s3_lake_env(bucket), "LAKESYNC_DATA_DIR": str(tmp_path / "data")}
    # The gateway refuses to start; a pipeline run on its data dir says the same.
    for args in (("up", "--port", str(free_port())), ("pipeline", "run")):
        line = _error_line(_cli(*args, cwd=tmp_path, env=env))
        assert f"bucket {bucket!r}" in line and "does not exist" in line, (args, line)

    # Opted in, the start creates it.
    opted_in = {**env, "LAKESYNC_S3_CREATE_BUCKET": "1"}
    check_storage(LakeSettings.from_env(tmp_path / "data", env=opted_in))
    s3_client().head_bucket(Bucket=bucket)
