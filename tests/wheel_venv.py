"""The wheel built from this checkout, installed alone in a new venv: what a user gets from
``pip install lakesync-….whl``. Built once per test session, shared by its xdist workers."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str | Path) -> str:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def session_dir(basetemp: Path) -> Path:
    """A folder of this test session shared by its xdist workers (each has its own
    ``basetemp`` under it); the session's own ``basetemp`` without xdist."""
    return basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp


def build_wheel_venv(shared: Path) -> Path:
    """A venv under ``shared`` holding only the wheel built from this checkout, built by the
    first caller (the others wait on a lock). Its dependencies come from the project's
    environment (a path entry to its site-packages, which the editable install's finder does
    not reach, so ``lakesync`` can only come from the wheel)."""
    venv = shared / "wheel-venv"
    ready = venv / ".lakesync-wheel-installed"
    with (shared / "wheel-venv.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ready.exists():
            dist = shared / "wheel-dist"
            _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                 "-q", "-w", dist, ROOT)
            wheel = next(dist.glob("lakesync-*.whl"))
            _run(sys.executable, "-m", "venv", venv)
            site = Path(_run(venv / "bin" / "python", "-c",
                             "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
            (site / "lakesync_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
            _run(venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps",
                 "--no-index", wheel)
            ready.touch()
    return venv
