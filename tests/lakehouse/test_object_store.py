"""The lake with its warehouse on object storage (``s3://`` on the local S3 server): the pipeline
end-to-end test (reference merge, shipped to PostgreSQL and MariaDB), every data and metadata
file in the bucket and none in the data dir, ``lakesync query`` (plain, fresh, time travel) and
compaction, checkpoints and lifecycle tiering, through pyiceberg, Spark's S3FileIO and DuckDB's
httpfs alike."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import typer
from typer.testing import CliRunner

from lakesync.cli.lake import query_command
from lakesync.delta import RowDelta
from lakesync.lakehouse.catalog import LANDING_IDENTIFIER, open_catalog
from lakesync.lakehouse.checkpoint_builder import build_checkpoints
from lakesync.lakehouse.compaction import compact
from lakesync.lakehouse.lifecycle import aged_rows
from lakesync.lakehouse.query import run_query
from lakesync.lakehouse.registry import publish_schemas
from lakesync.lakehouse.runner import run_pipeline
from lakesync.schema import parse_schema
from tests.conftest import fresh_s3_bucket, s3_client, s3_lake_env

from .conftest import Lake, make_lake
from .test_shipping import databases, ship_reference_history

__all__ = ["databases"]

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

GW = "gw_s3"
NOTES = parse_schema({"table": "notes", "columns": [{"name": "body", "type": "string"}]})
# What only the warehouse may hold: Parquet data, Avro manifests, Iceberg table metadata.
LAKE_FILE_SUFFIXES = (".parquet", ".avro", ".metadata.json")


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    return s3_lake_env(fresh_s3_bucket())


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[Lake]:
    lk = make_lake(tmp_path_factory.mktemp("s3lake"), env)
    yield lk
    lk.spark.stop()
    lk.log.close()


def _note(row: str, hlc: int, body: str, op: str = "INSERT") -> RowDelta:
    return RowDelta.create(op, "notes", row, "c1", {"body": body}, hlc)  # type: ignore[arg-type]


def test_the_pipeline_merges_and_ships_from_s3(lake: Lake, databases: tuple[str, str]) -> None:
    assert lake.settings.on_object_store
    ship_reference_history(lake, databases)


def test_the_bucket_holds_every_lake_file_and_the_data_dir_none(
    lake: Lake, env: dict[str, str]
) -> None:
    lake.land(GW, [_note("n1", 10, "a"), _note("n2", 11, "b")])
    run_pipeline(settings=lake.settings, schemas=[NOTES], tests=False)
    bucket, prefix = env["LAKESYNC_WAREHOUSE"].removeprefix("s3://").split("/", 1)
    pages = s3_client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    assert all(k.startswith(f"{prefix}/") for k in keys)
    for suffix in LAKE_FILE_SUFFIXES:
        assert any(k.endswith(suffix) for k in keys), suffix
    catalog = open_catalog(lake.settings)
    for ns in catalog.list_namespaces():
        for ident in catalog.list_tables(ns):
            table = catalog.load_table(ident)
            assert table.metadata_location.startswith(f"s3://{bucket}/{prefix}/")
            # Every file the table's current snapshot reads is in the bucket.
            for task in table.scan().plan_files():
                assert task.file.file_path.removeprefix(f"s3://{bucket}/") in keys
    local = [p for p in lake.settings.data_dir.rglob("*") if p.name.endswith(LAKE_FILE_SUFFIXES)]
    assert local == []


def test_query_fresh_reads_and_time_travel_on_s3(
    lake: Lake, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Registered, as a gateway publishes its schemas: fresh reads take the columns from there.
    publish_schemas(open_catalog(lake.settings), [(GW, NOTES)])
    lake.land(GW, [_note("q1", 20, "first")])
    run_pipeline(settings=lake.settings, schemas=[NOTES], tests=False)
    table = open_catalog(lake.settings).load_table("analytics.notes")
    before = table.current_snapshot()
    assert before is not None
    sql = f"select row_id, body from analytics.notes where gateway_id = '{GW}' order by row_id"
    spark_rows = [tuple(r.values()) for r in lake.rows(sql)]
    assert ("q1", "first") in spark_rows
    assert run_query(lake.settings, sql).rows == spark_rows

    lake.land(GW, [_note("q1", 21, "second", "UPDATE")])
    lake.log.append(GW, [_note("q2", 22, "hot")])  # in the hot log only
    fresh = run_query(lake.settings, sql, fresh=True, hot_log=lake.log).rows
    assert ("q1", "second") in fresh and ("q2", "hot") in fresh
    then = run_query(lake.settings, sql, snapshots={"analytics.notes": before.snapshot_id}).rows
    assert then == spark_rows

    # The command line reads the same settings from the environment.
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    app = typer.Typer()
    app.command()(query_command)
    out = CliRunner().invoke(app, [
        "--data-dir", str(lake.settings.data_dir), "--format", "json",
        f"select row_id, body from analytics.notes where gateway_id = '{GW}' and row_id = 'q1'",
    ])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout.strip()) == {"row_id": "q1", "body": "first"}
    assert env["LAKESYNC_S3_SECRET_ACCESS_KEY"] not in out.output


def test_compaction_on_s3_keeps_rows_and_removes_no_live_file(lake: Lake) -> None:
    for i in range(3):
        lake.land(GW, [_note(f"c{i}", 30 + i, f"batch {i}")])
    landing = "select count(*) as n from lakesync.landing"
    count = lake.rows(landing)[0]["n"]
    result = compact(lake.settings)
    assert result.failures == []
    by_table = {t.table: t for t in result.tables}
    assert by_table[LANDING_IDENTIFIER].files_after < by_table[LANDING_IDENTIFIER].files_before
    assert lake.rows(landing)[0]["n"] == count
    assert run_query(lake.settings, "select count(*) from landing").rows[0][0] == count



def test_checkpoints_and_tiering_read_the_models_on_s3(lake: Lake) -> None:
    lake.land(GW, [_note("t1", 40, "old")])  # HLC wall time 1970: aged for tiering
    run_pipeline(settings=lake.settings, schemas=[NOTES], tests=False)
    run = build_checkpoints(lake.settings, lake.log)  # the hot-log store serves checkpoints
    assert GW in run.gateways
    assert any(b.gateway_id == GW and b.rows > 0 for b in run.built)
    assert "t1" in aged_rows(open_catalog(lake.settings), GW, "notes", datetime.now(UTC))
