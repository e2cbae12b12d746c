"""Acceptance on an Iceberg REST catalog (a real server: Apache Iceberg's RESTCatalogServer):
the pipeline end to end, pyiceberg's landing flush and dbt on Spark (Iceberg's REST client)
through one catalog, change sets shipped to PostgreSQL and MariaDB equal to the reference merge
of a shuffled, duplicated, late history over several runs; time travel, fresh reads (DuckDB) and
compaction through the same catalog."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from lakesync.config import Config, GatewayConfig
from lakesync.delta import RowDelta
from lakesync.destination_specs import DestinationSpec
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.compaction import compact
from lakesync.lakehouse.materialise import materialise
from lakesync.lakehouse.query import run_query
from lakesync.lakehouse.registry import publish_schemas
from lakesync.lakehouse.runner import run_pipeline
from tests.rest_catalog import rest_catalog_server

from . import test_materialise
from .conftest import Lake, make_lake
from .test_materialise import GW, SCHEMA, expected, live_rows, random_history

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

databases = test_materialise.databases  # the fixture: fresh PostgreSQL and MariaDB databases


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    """A lake whose catalog is a REST catalog server of this module's own."""
    root = tmp_path_factory.mktemp("rest-lake")
    with rest_catalog_server(root / "rest") as uri:
        lk = make_lake(root / "data", env={"LAKESYNC_CATALOG_URI": uri})
        try:
            yield lk
        finally:
            lk.spark.stop()
            lk.log.close()


def test_the_pipeline_ships_the_reference_merge_through_a_rest_catalog(
    lake: Lake, databases: tuple[str, str]
) -> None:
    assert lake.settings.is_rest
    assert lake.spark.conf.get("spark.sql.catalog.lake.type") == "rest"
    pg_url, my_url = databases
    specs = {
        "pg": DestinationSpec("postgres", pg_url, GW, ["shipped"], "soft", name="pg"),
        "maria": DestinationSpec("mysql", my_url, GW, None, "hard", name="maria"),
    }
    config = Config(data_dir=lake.settings.data_dir, jwt_secrets=[],
                    gateways={GW: GatewayConfig(GW, [SCHEMA])}, destinations=specs)
    rng = random.Random(11)
    landed: list[RowDelta] = []
    snapshots: list[tuple[int, list[RowDelta]]] = []
    for run, base in enumerate([1000, 1030, 1010]):  # the third batch is late
        batch = random_history(rng, 120, base)
        lake.land(GW, batch)
        landed += batch
        run_pipeline(settings=lake.settings, schemas=[SCHEMA], tests=False, config=config)
        results = {r.destination: r for r in materialise(lake.settings, config, spark=lake.spark)}
        assert all(r.error is None for r in results.values()), results
        assert live_rows(specs["pg"]) == expected(landed, "postgres"), f"run {run}"
        assert live_rows(specs["maria"]) == expected(landed), f"run {run}"
        table = open_catalog(lake.settings).load_table("analytics.shipped")
        snapshot = table.current_snapshot()
        assert snapshot is not None
        snapshots.append((snapshot.snapshot_id, list(landed)))

    # DuckDB reads the current state, a pinned snapshot, and fresh deltas, through REST.
    sql = f"select row_id, title from analytics.shipped where gateway_id = '{GW}' order by 1"
    now = {r: v["title"] for r, v in expected(landed).items()}
    assert dict(run_query(lake.settings, sql).rows) == now
    first_id, first = snapshots[0]
    pinned = run_query(lake.settings, sql, snapshots={"analytics.shipped": first_id})
    assert dict(pinned.rows) == {r: v["title"] for r, v in expected(first).items()}
    publish_schemas(open_catalog(lake.settings), [(GW, SCHEMA)])  # what a fresh read decodes
    late = RowDelta.create("UPDATE", "shipped", "r1", "c9", {"title": "fresh"}, 2**63)
    lake.land(GW, [late])
    assert dict(run_query(lake.settings, sql, fresh=True).rows)["r1"] == "fresh"
    assert dict(run_query(lake.settings, sql).rows).get("r1") == now.get("r1")  # not merged

    # Compaction (Spark's procedures through the REST catalog) keeps every row.
    before = datetime.now(UTC)
    result = compact(lake.settings)
    assert not result.failures, result.failures
    assert dict(run_query(lake.settings, sql).rows) == now
    assert dict(run_query(lake.settings, sql, as_of=before).rows) == now
