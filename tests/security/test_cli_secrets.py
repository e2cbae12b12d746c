"""What the CLI prints of the secrets its configuration resolves: nothing. A destination whose
URL is a ``${VAR}`` or ``${file:…}`` holding a libpq key=value DSN (its secret in
``application_name``, where no pattern looks) is refused with a message quoting the DSN; the
real ``lakesync`` command's error line and its log lines mask it, as the worker's log does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gateway_process import ROOT

SECRET = "Resolved-App-S3cret"
DSN = f"host=127.0.0.1 port=1 user=u password=pw application_name={SECRET} dbname=db"


def _lakesync(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LAKESYNC_")}
    return subprocess.run(
        [sys.executable, "-m", "lakesync.cli", *args],
        capture_output=True, text=True, env={**clean, "PYTHONPATH": str(ROOT), **env},
        cwd=tmp_path, timeout=120, check=False,
    )


@pytest.mark.parametrize("reference", ["env", "file"])
def test_the_error_line_masks_what_a_reference_resolves_to(
    tmp_path: Path, reference: str
) -> None:
    (tmp_path / "dsn.txt").write_text(DSN + "\n", encoding="utf-8")
    url = "${LAKESYNC_TEST_DSN}" if reference == "env" else f"${{file:{tmp_path / 'dsn.txt'}}}"
    config = tmp_path / "lakesync.yaml"
    config.write_text(json.dumps({
        "gateways": {"gw1": {"schemas": [
            {"table": "orders", "columns": [{"name": "total", "type": "number"}]}
        ]}},
        "destinations": {
            "a": {"kind": "postgres", "gateway": "gw1", "url": url},
            "b": {"kind": "postgres", "gateway": "gw1", "url": "postgresql://u@127.0.0.1:1/db"},
        },
    }), encoding="utf-8")
    done = _lakesync(tmp_path, {"LAKESYNC_TEST_DSN": DSN},
                     "migrate", "--from", "a", "--to", "b", "--config", str(config))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: destination 'a': a postgres url"), done.stderr
    assert SECRET not in done.stdout + done.stderr, done.stderr


def test_log_lines_mask_the_secrets_a_command_made_known(tmp_path: Path) -> None:
    script = (
        "import logging\n"
        "from lakesync.cli import output\n"
        "from lakesync.cli.main import main\n"
        "from lakesync.redaction import Redactor\n"
        f"output.hide_secrets(Redactor([{DSN!r}]))\n"
        "main(['--help'])\n"
        f"logging.getLogger('lakesync.lakehouse').warning('unreadable (%s)', {DSN!r})\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LAKESYNC_")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**clean, "PYTHONPATH": str(ROOT)}, cwd=tmp_path, timeout=120,
                          check=False)
    assert "WARNING:lakesync.lakehouse:unreadable (***)" in done.stderr, done.stderr
    assert SECRET not in done.stderr
