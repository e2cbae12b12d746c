"""``lakesync up`` schedules ``lakesync compact`` in its warm pipeline worker.

Real parts: the gateway's SQLite hot log and landing flusher, :func:`lakesync.api.lake.lake_jobs`
with a short compaction interval, the worker process running Spark and dbt.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from lakesync.api.lake import lake_jobs
from lakesync.api.settings import GatewaySettings
from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.hotlog.factory import open_store
from lakesync.lakehouse.bootstrap import bootstrap
from lakesync.lakehouse.catalog import LANDING_IDENTIFIER, open_catalog
from lakesync.lakehouse.compaction import data_files
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.settings import LakeSettings

pytestmark = [pytest.mark.spark, pytest.mark.slow]

GIVE_UP_S = 600.0
"""Not a speed bound: how long to wait for the first scheduled compaction before failing."""


def test_the_gateway_compacts_the_lake_on_its_schedule(tmp_path: Path) -> None:
    lake = LakeSettings.from_env(tmp_path, env={})
    bootstrap(lake)
    store = open_store("sqlite", tmp_path, HLC())
    flusher = LandingFlusher(open_catalog(lake), store)
    for b in range(4):
        store.append("gw1", [RowDelta.create("INSERT", "todos", f"r{b}", "c1", {"n": b}, 10 + b)])
        flusher.flush()
    landing = open_catalog(lake).load_table(LANDING_IDENTIFIER)
    assert data_files(landing)[0] == 4
    settings = GatewaySettings(
        data_dir=tmp_path,
        jwt_secrets=("secret",),
        flush_interval=0,
        pipeline_interval=0,
        compaction_interval=1,
    )
    log = tmp_path / "pipeline.log"
    try:
        with lake_jobs(settings, store):
            deadline = time.monotonic() + GIVE_UP_S
            while time.monotonic() < deadline and "compaction done" not in (
                log.read_text() if log.exists() else ""
            ):
                time.sleep(1)
    finally:
        store.close()
    assert "compacted lakesync.landing: 4 → 1 data files" in log.read_text()
    assert data_files(landing.refresh())[0] == 1
