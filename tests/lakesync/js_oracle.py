"""Run the JavaScript oracle (tests/js/canonical.js) once for a whole batch of documents."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

JS_DIR = Path(__file__).resolve().parents[1] / "js"
SETUP_HINT = "npm ci --prefix tests/js"


def run_oracle(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Feed ``{"value": v}`` / ``{"delta": {...}}`` documents to node in ONE process.

    Returns ``(canonical, sha256)`` per document. Fails (never skips) when node or the
    oracle's npm dependencies are missing, so CI cannot silently lose the cross-check.
    """
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed; the JavaScript canonical-JSON oracle needs node >= 18")
    if not (JS_DIR / "node_modules" / "fast-json-stable-stringify").is_dir():
        pytest.fail(f"tests/js/node_modules is missing; run the setup (`{SETUP_HINT}`)")
    # ensure_ascii keeps lone surrogates representable; JSON.parse restores them exactly.
    stdin = "".join(json.dumps(d, allow_nan=False) + "\n" for d in docs)
    proc = subprocess.run(
        [node, str(JS_DIR / "canonical.js")],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=JS_DIR,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"JavaScript oracle failed ({proc.returncode}): {proc.stderr.strip()}")
    # Not splitlines(): JSON.stringify leaves U+2028 and friends raw, and Python splits on them.
    lines = proc.stdout.rstrip("\n").split("\n") if proc.stdout else []
    assert len(lines) == len(docs), proc.stderr
    out = [json.loads(line) for line in lines]
    return [(o["canonical"], o["sha256"]) for o in out]
