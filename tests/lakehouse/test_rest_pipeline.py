"""Acceptance on an Iceberg REST catalog (a real server: Apache Iceberg's RESTCatalogServer),
its warehouse on local files and on the local S3 server: the pipeline end to end, pyiceberg's
landing flush and dbt on Spark (Iceberg's REST client) through one catalog, change sets shipped
to PostgreSQL and MariaDB equal to the reference merge of a shuffled, duplicated, late history
over several runs (``ship_reference_history``); then time travel, fresh reads (DuckDB) and
compaction through the same catalog."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from lakesync.delta import RowDelta
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.compaction import compact
from lakesync.lakehouse.object_store import S3FILEIO
from lakesync.lakehouse.query import run_query
from lakesync.lakehouse.registry import publish_schemas
from tests.conftest import (
    S3_ACCESS_KEY_ID,
    S3_ENDPOINT,
    S3_SECRET_ACCESS_KEY,
    fresh_s3_bucket,
    s3_client,
    s3_lake_env,
)
from tests.rest_catalog import rest_catalog_server

from . import test_materialise
from .conftest import Lake, make_lake
from .test_materialise import GW, SCHEMA, ship_reference_history

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

databases = test_materialise.databases  # the fixture: fresh PostgreSQL and MariaDB databases


@pytest.fixture(scope="module", params=["files", "s3"])
def lake(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Lake]:
    """A lake whose catalog is a REST catalog server of its own, the warehouse on local files
    or in a fresh bucket of the local S3 server (the server vending its keys as well)."""
    root = tmp_path_factory.mktemp("rest-lake")
    warehouse, server_env, lake_env = None, {}, {}
    if request.param == "s3":
        bucket = fresh_s3_bucket()
        warehouse = f"s3://{bucket}/lake"
        server_env = {
            "CATALOG_IO__IMPL": S3FILEIO, "CATALOG_S3_ENDPOINT": S3_ENDPOINT,
            "CATALOG_S3_PATH__STYLE__ACCESS": "true", "CATALOG_CLIENT_REGION": "us-east-1",
            "CATALOG_S3_ACCESS__KEY__ID": S3_ACCESS_KEY_ID,
            "CATALOG_S3_SECRET__ACCESS__KEY": S3_SECRET_ACCESS_KEY,
            "CATALOG_INCLUDE__CREDENTIALS": "true",
        }
        lake_env = s3_lake_env(bucket)
    with rest_catalog_server(root / "rest", warehouse, server_env) as uri:
        lk = make_lake(root / "data", env={**lake_env, "LAKESYNC_CATALOG_URI": uri})
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
    ship_reference_history(lake, databases)

    # DuckDB reads what Spark reads, now, at a pinned snapshot and fresh, through REST.
    sql = f"select row_id, title from analytics.shipped where gateway_id = '{GW}' order by 1"
    spark_rows = [tuple(r.values()) for r in lake.rows(sql)]
    assert spark_rows and run_query(lake.settings, sql).rows == spark_rows
    snapshot = open_catalog(lake.settings).load_table("analytics.shipped").current_snapshot()
    assert snapshot is not None
    publish_schemas(open_catalog(lake.settings), [(GW, SCHEMA)])  # what a fresh read decodes
    late = RowDelta.create("UPDATE", "shipped", spark_rows[0][0], "c9", {"title": "fresh"}, 2**63)
    lake.land(GW, [late])
    fresh = dict(run_query(lake.settings, sql, fresh=True).rows)
    assert fresh[spark_rows[0][0]] == "fresh"
    pinned = run_query(lake.settings, sql, snapshots={"analytics.shipped": snapshot.snapshot_id})
    assert pinned.rows == spark_rows

    # Compaction (Spark's procedures through the REST catalog) keeps every row.
    before = datetime.now(UTC)
    result = compact(lake.settings)
    assert not result.failures, result.failures
    assert run_query(lake.settings, sql, as_of=before).rows == spark_rows
    if lake.settings.on_object_store:
        bucket = lake.settings.warehouse.removeprefix("s3://").split("/")[0]
        listed = s3_client().list_objects_v2(Bucket=bucket)
        assert any(o["Key"].endswith(".metadata.json") for o in listed["Contents"])
        assert not (lake.settings.data_dir / "warehouse").exists()
