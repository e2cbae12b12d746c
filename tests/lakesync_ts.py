"""The original TypeScript LakeSync client (``../shared/lakesync-ts``) as a black box: run under
bun or bundled for the browser, driving ``tests/js/lakesync_ts_probe.ts``.

``scripts/setup.sh`` installs it (bun and the monorepo's dependencies) into
``.servers/lakesync-ts`` when ``../shared/lakesync-ts`` exists (``LAKESYNC_TEST_TS_DIR`` names
another install). Where ``../shared`` is absent (a user's machine) the tests that need it skip,
saying why; under CI (env ``CI``) they fail instead, as a missing test server does
(tests/conftest.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.gateway_process import ROOT

SHARED = ROOT.parent / "shared" / "lakesync-ts"
TS_DIR = Path(os.environ.get("LAKESYNC_TEST_TS_DIR") or ROOT / ".servers" / "lakesync-ts")
PROBE = ROOT / "tests" / "js" / "lakesync_ts_probe.ts"
CLIENT_PACKAGE = TS_DIR / "lakesync" / "packages" / "client"


def require_ts_client() -> Path:
    """The bun executable of the installed TypeScript LakeSync; else skip the calling test
    with the reason, or fail it when env ``CI`` is set."""
    bun = TS_DIR / "bun"
    if bun.exists() and (CLIENT_PACKAGE / "src" / "index.ts").is_file():
        return bun
    if SHARED.is_dir():
        reason = (f"the TypeScript LakeSync client is not installed in {TS_DIR}: run "
                  "scripts/setup.sh (it installs it from ../shared/lakesync-ts)")
    else:
        reason = (f"the original TypeScript LakeSync ({SHARED}) is absent: its client cannot "
                  "be run here")
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: a missing client fails the test)", pytrace=False)
    pytest.skip(reason)


def probe_in_package() -> Path:
    """The probe, copied into the client package (where its imports resolve) under a name of
    its content, so parallel tests and runs of another checkout never overwrite each other."""
    text = PROBE.read_bytes()
    placed = CLIENT_PACKAGE / f"lakesync-probe-{hashlib.sha256(text).hexdigest()[:12]}.ts"
    if not placed.exists():
        partial = placed.with_suffix(f".{os.getpid()}.tmp")
        partial.write_bytes(text)
        partial.replace(placed)
    return placed


def run_websocket_scenario(scenario: dict[str, Any], timeout: float = 300) -> dict[str, Any]:
    """Run ``websocketScenario`` of the probe under bun; its result, or a failure with the
    probe's error."""
    return _run_probe(scenario, timeout)


def run_script(scenario: dict[str, Any], timeout: float = 300) -> dict[str, Any]:
    """Run ``scriptScenario`` of the probe under bun (``scenario["steps"]``: clients syncing
    over HTTP, step by step); its result (``rows``: what each ``rows`` step read; ``cursors``:
    each client's cursor at the end), or a failure with the probe's error."""
    assert "steps" in scenario
    return _run_probe(scenario, timeout)


def _run_probe(scenario: dict[str, Any], timeout: float) -> dict[str, Any]:
    bun = require_ts_client()
    proc = subprocess.run(
        [str(bun), "run", str(probe_in_package())], input=json.dumps(scenario),
        capture_output=True, text=True, timeout=timeout, check=False, cwd=CLIENT_PACKAGE,
    )
    assert proc.returncode == 0, f"the TypeScript client failed:\n{proc.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def build_browser_bundle(out: Path) -> Path:
    """Bundle the probe for the browser (``bun build --target browser``) into ``out`` with the
    ``sql-wasm.wasm`` sql.js loads beside it; returns ``out``."""
    bun = require_ts_client()
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [str(bun), "build", str(probe_in_package()), "--target", "browser",
         "--outfile", str(out / "lakesync-probe.js")],
        capture_output=True, text=True, timeout=300, check=False, cwd=CLIENT_PACKAGE,
    )
    assert proc.returncode == 0, f"bun build failed:\n{proc.stdout}\n{proc.stderr}"
    wasm = sorted((TS_DIR / "lakesync" / "node_modules").rglob("sql.js/dist/sql-wasm.wasm"))
    assert wasm, f"sql.js's sql-wasm.wasm is missing under {TS_DIR}"
    shutil.copy(wasm[-1], out / "sql-wasm.wasm")
    return out
