"""The object store stopped in the middle of a pipeline run and of a compaction (dbt and the
Iceberg procedures on Spark, through Iceberg's S3FileIO), with the warehouse on the local S3
server behind a :class:`~tests.fault_proxy.FaultProxy` of this module's own: the proxy is cut
at Spark's first write, so the failure comes mid-run, not at a guessed moment, and the shared
S3 server keeps serving everyone else.

That run fails saying which store to check (an
:class:`~lakesync.lakehouse.object_store.ObjectStoreError`, not a JVM's stack trace); once the
store is back the next run converges (the shipped destinations equal the reference merge,
nothing twice), and after a failed compaction the next one succeeds and every row is still
there.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from lakesync.config import Config, GatewayConfig
from lakesync.destination_specs import DestinationSpec
from lakesync.lakehouse.catalog import LANDING_IDENTIFIER, open_catalog
from lakesync.lakehouse.compaction import compact
from lakesync.lakehouse.object_store import ObjectStoreError
from lakesync.lakehouse.runner import run_pipeline
from lakesync.lakehouse.shipping import ship
from tests.conftest import S3_ENDPOINT, S3_SECRET_ACCESS_KEY, fresh_s3_bucket, s3_lake_env
from tests.fault_proxy import FaultProxy, Request

from . import test_shipping
from .conftest import Lake, make_lake
from .test_shipping import GW, SCHEMA, expected, live_rows, random_history

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

databases = test_shipping.databases  # the fixture: fresh PostgreSQL and MariaDB databases


@pytest.fixture(scope="module")
def store() -> Iterator[FaultProxy]:
    fresh_s3_bucket()  # skips (fails under CI) without the S3 server
    with FaultProxy(S3_ENDPOINT) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, store: FaultProxy) -> Iterator[Lake]:
    env = {**s3_lake_env(fresh_s3_bucket()), "LAKESYNC_S3_ENDPOINT": store.url}
    lk = make_lake(tmp_path_factory.mktemp("s3-outage"), env)
    yield lk
    lk.spark.stop()
    lk.log.close()


def _spark_write(under: str) -> Callable[[Request], bool]:
    """Picks Spark's first upload (S3FileIO PUTs; pyarrow's start with a POST) of a data file
    of the tables under ``under``."""
    return lambda r: r[0] == "PUT" and f"/{under}/" in r[1] and ".parquet" in r[1]


def _cut_at(store: FaultProxy, pick: Callable[[Request], bool], run: Callable[[], Any]) -> Any:
    """Run ``run`` with the store cut off (connections reset, new ones refused) from the first
    request ``pick`` chooses, and restore it after. Returns what ``run`` returned, or the
    exception it raised (what it says is the test's to check)."""
    done, cut = threading.Event(), threading.Event()

    def cutter() -> None:
        while not done.is_set():
            if store.held.wait(0.1):
                store.cut()
                cut.set()
                return

    store.hold(pick)
    thread = threading.Thread(target=cutter, daemon=True)
    thread.start()
    outcome: Any
    try:
        outcome = run()
    except Exception as exc:
        outcome = exc
    finally:
        done.set()
        thread.join(30)
        store.release()
        if cut.is_set():
            store.restore()
    assert cut.is_set(), "the run never wrote to the store: nothing was cut"
    return outcome


def test_a_pipeline_run_cut_off_from_the_store_fails_and_the_next_converges(
    lake: Lake, store: FaultProxy, databases: tuple[str, str]
) -> None:
    pg_url, my_url = databases
    specs = {
        "pg": DestinationSpec("postgres", pg_url, GW, ["shipped"], "soft", name="pg"),
        "maria": DestinationSpec("mysql", my_url, GW, None, "hard", name="maria"),
    }
    config = Config(data_dir=lake.settings.data_dir, jwt_secrets=[],
                    gateways={GW: GatewayConfig(GW, [SCHEMA])}, destinations=specs)
    rng = random.Random(11)

    def run() -> None:
        run_pipeline(settings=lake.settings, schemas=[SCHEMA], tests=False, config=config)
        results = ship(lake.settings, config, spark=lake.spark)
        assert all(r.error is None for r in results), results

    landed = random_history(rng, 120, 1000)
    lake.land(GW, landed)
    run()
    late = random_history(rng, 120, 990)  # late, with duplicates of the first batch
    lake.land(GW, late + landed[:20])
    landed += late

    failed = _cut_at(store, _spark_write("analytics"), run)
    assert isinstance(failed, ObjectStoreError), failed  # says what to check
    assert "could not be reached" in failed.message and "lake.s3_endpoint" in failed.message
    assert store.url in failed.message
    assert S3_SECRET_ACCESS_KEY not in failed.message

    run()  # the store is back: this run converges
    assert live_rows(specs["pg"]) == expected(landed, "postgres")
    assert live_rows(specs["maria"]) == expected(landed)
    again = ship(lake.settings, config, spark=lake.spark)
    assert all(r.rows == 0 for r in again), again  # nothing twice


def test_a_compaction_cut_off_from_the_store_fails_and_the_next_keeps_every_row(
    lake: Lake, store: FaultProxy
) -> None:
    for i in range(4):
        lake.land("gw_compact", random_history(random.Random(i), 20, 5000 + 100 * i))
    count = "select count(*) as n from lakesync.landing"
    before = lake.rows(count)[0]["n"]
    files = "select count(*) as n from lakesync.landing.files where content = 0"
    files_before = lake.rows(files)[0]["n"]

    result = _cut_at(store, _spark_write("landing"), lambda: compact(lake.settings))
    failures = result.failures if not isinstance(result, Exception) else [str(result)]
    assert failures, "the compaction cut off from its store succeeded"
    assert any("could not be reached" in f and "lake.s3_endpoint" in f for f in failures), failures
    assert lake.rows(count)[0]["n"] == before  # the failed rewrite lost no live file

    result = compact(lake.settings)
    assert result.failures == [], result.failures
    by_table = {t.table: t for t in result.tables}
    assert by_table[LANDING_IDENTIFIER].files_after < files_before
    assert lake.rows(count)[0]["n"] == before
    table = open_catalog(lake.settings).load_table(LANDING_IDENTIFIER)
    assert len(table.scan().to_arrow()) == before  # every live file is there and reads
