"""Acceptance on an Iceberg REST catalog (a real server: Apache Iceberg's RESTCatalogServer),
its warehouse on local files and on the local S3 server: the pipeline end to end, pyiceberg's
landing flush and dbt on Spark (Iceberg's REST client) through one catalog, change sets shipped
to PostgreSQL and MariaDB equal to the reference merge of a shuffled, duplicated, late history
over several runs (``ship_reference_history``); then time travel, fresh reads (DuckDB) and
compaction through the same catalog; checkpoints built from the models (DuckDB) and lifecycle
tiering by the lake's row clocks (pyiceberg), shipping and ``--lifecycle-only`` alike."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from lakesync.config import Config, GatewayConfig
from lakesync.delta import RowDelta
from lakesync.destination_specs import DestinationSpec
from lakesync.destinations.factory import open_destination
from lakesync.hlc import encode
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.checkpoint_builder import build_checkpoints
from lakesync.lakehouse.compaction import compact
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.lifecycle import aged_rows
from lakesync.lakehouse.query import run_query
from lakesync.lakehouse.registry import publish_schemas
from lakesync.lakehouse.runner import run_pipeline
from lakesync.lakehouse.settings import LakeSettings
from lakesync.lakehouse.shipping import ship, tier
from lakesync.schema import parse_schema
from tests.conftest import fresh_s3_bucket, s3_client, s3_lake_env
from tests.rest_catalog import rest_catalog_server, s3_catalog_env

from . import test_shipping
from .conftest import Lake, append_in_order, make_lake
from .test_shipping import GW, SCHEMA, ship_reference_history

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

databases = test_shipping.databases  # the fixture: fresh PostgreSQL and MariaDB databases


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
        server_env = s3_catalog_env()
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


NOTES = parse_schema({"table": "notes", "columns": [{"name": "body", "type": "string"}]})


def test_checkpoints_and_lifecycle_tiering_through_a_rest_catalog(
    lake: Lake, databases: tuple[str, str]
) -> None:
    """After a pipeline run, the gateway's checkpoint (the models read with DuckDB through the
    REST catalog) holds each row's merged state through the landed position; shipping to a
    PostgreSQL destination with a 30-day hot window evicts the rows whose last change in the
    lake (read with pyiceberg through the catalog) is older, and a later ``--lifecycle-only``
    tiering (no Spark) the rows that aged since."""
    gw = "gw_rest_tier"
    now = datetime.now(UTC)

    def clock(days_ago: int, counter: int = 0) -> int:
        return encode(int((now - timedelta(days=days_ago)).timestamp() * 1000), counter)

    ingested = append_in_order(lake.log, [(gw, d) for d in [
        RowDelta.create("INSERT", "notes", "new", "c1", {"body": "new"}, clock(0, 5)),
        RowDelta.create("INSERT", "notes", "old", "c1", {"body": "old"}, clock(40)),
        RowDelta.create("INSERT", "notes", "gone", "c1", {"body": "gone"}, clock(40, 1)),
        RowDelta.create("DELETE", "notes", "gone", "c2", {}, clock(39)),
        # late: an older clock than the insert it follows, so it loses
        RowDelta.create("UPDATE", "notes", "new", "c2", {"body": "late"}, clock(0, 1)),
    ]])
    LandingFlusher(open_catalog(lake.settings), lake.log).flush()
    hot = DestinationSpec("postgres", databases[0], gw, hot_window="30d", name="hot")
    config = Config(data_dir=lake.settings.data_dir, jwt_secrets=[],
                    gateways={gw: GatewayConfig(gw, [NOTES])}, destinations={"hot": hot})
    run_pipeline(settings=lake.settings, schemas=[NOTES], tests=False, config=config)

    run = build_checkpoints(lake.settings, lake.log)
    assert gw in run.gateways
    [built] = [b for b in run.built if b.gateway_id == gw]
    assert built.position >= max(ingested)
    published = lake.log.checkpoint(gw)
    assert published is not None and published.position == built.position
    stored = [row for seq in range(built.chunks)
              for row in msgspec.msgpack.decode(lake.log.checkpoint_chunk(gw, built.position, seq))]
    # (table, row_id, last ingest, visible columns, live, real state)
    assert {(r[0], r[1]): (r[3], r[4]) for r in stored} == {
        ("notes", "gone"): (None, False),
        ("notes", "new"): ({"body": "new"}, True),
        ("notes", "old"): ({"body": "old"}, True),
    }

    assert aged_rows(open_catalog(lake.settings), gw, "notes", now - timedelta(days=30)) == [
        "gone", "old"]
    [shipped] = ship(lake.settings, config, spark=lake.spark)
    assert (shipped.table, shipped.error) == ("notes", None)
    assert shipped.evicted >= 1

    def in_postgres() -> dict[str, str]:
        with open_destination(hot, env={}) as dest:
            rows = dest.read_rows(dest.layout("notes", [("body", "string")]))
        return {r["row_id"]: r["body"] for r in rows}

    assert in_postgres() == {"new": "new"}  # the aged rows left the hot tier
    [tiered] = tier(lake.settings, config, now=now + timedelta(days=31))
    assert (tiered.table, tiered.evicted, tiered.error) == ("notes", 1, None)
    assert in_postgres() == {}
    sql = f"select row_id, body from analytics.notes where gateway_id = '{gw}' order by row_id"
    assert run_query(lake.settings, sql).rows == [("new", "new"), ("old", "old")]
    if lake.settings.on_object_store:  # the checkpoint and the tiering wrote no lake file here
        assert not (lake.settings.data_dir / "warehouse").exists()


def test_spark_writes_and_reads_s3_with_only_the_credentials_the_catalog_vends(
    lake: Lake,
) -> None:
    """A Spark catalog on the same REST server configured as ``profiles.yml`` renders it for a
    lake told where the store is (``lake.s3_endpoint``, ``s3_region``, ``s3_path_style``) but
    given no S3 key, with no AWS credentials in the environment: Iceberg's REST client asks
    for vended credentials (the server vends only its keys), and S3FileIO writes and reads the
    bucket with them."""
    if not lake.settings.on_object_store:
        pytest.skip("a warehouse on local files takes no credentials")
    assert not any(k in os.environ for k in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE"))
    s3 = lake.settings.s3
    assert s3.endpoint and s3.region
    env = {"LAKESYNC_WAREHOUSE": lake.settings.warehouse,
           "LAKESYNC_CATALOG_URI": lake.settings.catalog_uri,
           "LAKESYNC_S3_ENDPOINT": s3.endpoint, "LAKESYNC_S3_REGION": s3.region,
           "LAKESYNC_S3_PATH_STYLE": str(s3.path_style).lower()}
    keyless = LakeSettings.from_env(lake.settings.data_dir, env=env)
    assert keyless.s3.access_key_id is None and keyless.s3.secret_access_key is None
    props = {k.removeprefix("spark.sql.catalog.lake"): v for k, v in keyless.spark_conf().items()
             if k.startswith("spark.sql.catalog.lake")}
    assert props[".header.X-Iceberg-Access-Delegation"] == "vended-credentials"
    assert not any("access-key" in k or "secret" in k for k in props)
    for key, value in props.items():  # a catalog Spark opens on first use
        lake.spark.conf.set(f"spark.sql.catalog.vended{key}", value)
    lake.spark.sql("create namespace if not exists vended.probe")
    lake.spark.sql("create table vended.probe.t (id int, v string) using iceberg")
    lake.spark.sql("insert into vended.probe.t values (1, 'a'), (2, 'b')")
    rows = lake.spark.sql("select id, v from vended.probe.t order by id").collect()
    assert [tuple(r) for r in rows] == [(1, "a"), (2, "b")]
    location = open_catalog(lake.settings).load_table("probe.t").metadata_location
    assert location.startswith(f"{lake.settings.warehouse}/")
