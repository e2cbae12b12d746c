"""The same cross-check on a Spark standalone cluster (master + two workers on loopback) with the
Iceberg catalog in PostgreSQL: scale-out is configuration only (master URL, catalog, warehouse)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, example, given, settings

from lakesync.delta import RowDelta
from lakesync.lakehouse.runner import run_pipeline
from tests.conftest import PG_DSN, require_postgres
from tests.gateway_process import free_port

from .conftest import Lake, make_lake
from .test_pipeline import CORNERS, SCHEMAS, TYPES, actual, expected, histories

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow, pytest.mark.postgres]


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@pytest.fixture(scope="module")
def pg_database() -> Iterator[tuple[str, str | None, str | None]]:
    """A throwaway PostgreSQL database for the catalog: (jdbc uri, user, password)."""
    import psycopg

    require_postgres()
    name = f"lakesync_lake_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_DSN, autocommit=True) as con:
        con.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(PG_DSN)
    host = f"{parts.hostname or '127.0.0.1'}:{parts.port or 5432}"
    yield f"jdbc:postgresql://{host}/{name}", parts.username, parts.password
    with psycopg.connect(PG_DSN, autocommit=True) as con:
        con.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A standalone master and two 1-core workers from the installed pyspark; yields the URL."""
    root = tmp_path_factory.mktemp("cluster")
    home = _spark_home()
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable, "SPARK_LOG_DIR": str(root)}
    port, ui = free_port(), free_port()
    spark_class = str(home / "bin" / "spark-class")
    procs = [subprocess.Popen(
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(port), "--webui-port", str(ui)],
        env=env, stdout=(root / "master.log").open("w"), stderr=subprocess.STDOUT,
    )]
    url = f"spark://127.0.0.1:{port}"
    try:
        for i in range(2):
            work = root / f"worker{i}"
            work.mkdir()
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--cores", "1",
                 "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(work),
                 "--host", "127.0.0.1", url],
                env=env, stdout=(root / f"worker{i}.log").open("w"), stderr=subprocess.STDOUT,
            ))
        deadline = time.monotonic() + 90
        alive = 0
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                    state = json.load(r)
                alive = sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")
            except OSError:
                alive = 0
            if alive == 2:
                break
            time.sleep(0.5)
        assert alive == 2, (root / "master.log").read_text()[-2000:]
        yield url
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture(scope="module")
def cluster_lake(
    tmp_path_factory: pytest.TempPathFactory,
    cluster: str,
    pg_database: tuple[str, str | None, str | None],
) -> Iterator[Lake]:
    uri, user, password = pg_database
    env = {
        "LAKESYNC_SPARK_MASTER": cluster,
        "LAKESYNC_SPARK_CORES_MAX": "2",
        "LAKESYNC_SPARK_EXECUTOR_MEMORY": "1g",
        "LAKESYNC_CATALOG_URI": uri,
    }
    if user:
        env["LAKESYNC_CATALOG_USER"] = user
    if password:
        env["LAKESYNC_CATALOG_PASSWORD"] = password
    lk = make_lake(tmp_path_factory.mktemp("clusterlake"), env)
    assert lk.spark.sparkContext.master == cluster
    yield lk
    lk.spark.stop()
    lk.log.close()


@settings(
    max_examples=1, derandomize=True, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@example(history=CORNERS)
@given(history=histories())
def test_models_equal_merge_state_on_cluster_with_postgres_catalog(
    cluster_lake: Lake, history: list[list[RowDelta]]
) -> None:
    gw = f"gw{uuid.uuid4().hex[:8]}"
    seen: list[RowDelta] = []
    for batch in history:
        cluster_lake.land(gw, batch)
        seen += batch
        run_pipeline(settings=cluster_lake.settings, schemas=SCHEMAS, tests=False)
        for table in TYPES:
            assert actual(cluster_lake, gw, table) == expected(seen, table)
    # The work really ran on the workers' executors, not in the driver.
    executors = cluster_lake.spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
    assert executors >= 3  # the driver's block manager + two executors
