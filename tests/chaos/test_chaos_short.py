"""The chaos run in the normal suite: two minutes of faults from a fixed seed on three gateway
processes; every invariant of :mod:`tests.chaos.harness` must hold. ``bench/chaos.py`` is the
long run of the same harness."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.chaos.harness import ChaosRun
from tests.chaos.postgres import postgres_bin

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.xdist_group("chaos")]

SEED = 3  # its two minutes hold every kind of fault


def test_two_minutes_of_faults_break_no_invariant() -> None:
    if postgres_bin() is None or shutil.which("runuser") is None or os.geteuid() != 0:
        reason = "needs the PostgreSQL server binaries and root (initdb as postgres)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    run = ChaosRun(SEED, 120.0)
    result = None
    try:
        result = run.run()
    finally:
        run.close(keep=result is None or bool(result.violations))
    assert result.violations == [], f"{result.figures()}\nlogs kept in {run.base}"
    assert result.acked > 0 and result.faults
