"""The chaos run in the normal suite: 100 seconds of faults from a fixed seed on three gateway
processes, checked against every invariant of :mod:`tests.chaos.harness`. Its merged models come
from the stand-in (:mod:`tests.chaos.lake_models`, every 5 s; Spark is too heavy here), so the
gateways publish checkpoints and trim the hot log during the run and clients re-sync from the
checkpoint. ``bench/chaos.py`` is the long run of the same harness, with the real pipeline."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.chaos.harness import (
    AVAILABILITY,
    CONVERGENCE,
    DURABILITY,
    PRIVACY,
    ChaosResult,
    ChaosRun,
)
from tests.pg_cluster import postgres_bin

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.xdist_group("chaos")]

SEED = 213  # its 100 seconds hold every kind of fault
SECONDS = 100.0


@pytest.fixture(scope="module")
def chaos() -> Iterator[ChaosResult]:
    """One short run shared by the module's tests; its directory is kept (and named in
    the failures) when an invariant broke."""
    if postgres_bin() is None or shutil.which("runuser") is None or os.geteuid() != 0:
        reason = "needs the PostgreSQL server binaries and root (initdb as postgres)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    run = ChaosRun(SEED, SECONDS, models=5.0)
    result = None
    try:
        result = run.run()
    finally:
        run.close(keep=result is None or bool(result.violations))
    yield result


def _broken(result: ChaosResult, kinds: set[str]) -> list[str]:
    return [text for kind, text in result.violations if kind in kinds]


def test_no_acknowledged_write_is_lost_and_every_process_and_replica_converges_privately(
    chaos: ChaosResult,
) -> None:
    assert chaos.acked > 0 and chaos.faults
    broken = _broken(chaos, {DURABILITY, CONVERGENCE, PRIVACY})
    assert broken == [], f"{chaos.figures()}\nlogs kept in {chaos.logs}"


def test_no_500_no_process_exits_and_writes_go_on_while_one_process_is_faulted(
    chaos: ChaosResult,
) -> None:
    broken = _broken(chaos, {AVAILABILITY})
    assert broken == [], f"{chaos.figures()}\nlogs kept in {chaos.logs}"


def test_the_lake_lanes_publish_checkpoints_and_trim_the_log_during_the_faults(
    chaos: ChaosResult,
) -> None:
    assert chaos.lake["checkpoints published"] > 0, chaos.figures()
    assert chaos.lake["hot-log entries trimmed"] > 0, chaos.figures()
