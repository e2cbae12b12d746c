"""Iceberg maintenance through dbt on Spark (``lakesync compact``, ``macros/maintenance.sql``).

Real parts: the gateway's SQLite hot log and landing flusher, Spark + dbt in this process, the
Iceberg procedures. The module's lake gets many small landing batches and one pipeline run; the
tests then run in order: compact (files drop, results and time travel unchanged), expire with a
zero retention, compact while the flusher appends.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from typer.testing import CliRunner

from lakesync.cli.main import app
from lakesync.delta import RowDelta
from lakesync.lakehouse.catalog import (
    LANDED_LATE_PROPERTY,
    LANDING_IDENTIFIER,
    landing_state,
    open_catalog,
)
from lakesync.lakehouse.compaction import compact
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.models import prepare_project
from lakesync.lakehouse.registry import publish_schemas
from lakesync.lakehouse.runner import dbt_invoke, run_pipeline
from lakesync.schema import parse_schema

from .conftest import Lake, append_in_order

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

GW = "gw_compact"
TODOS = parse_schema(
    {
        "table": "todos",
        "columns": [{"name": "title", "type": "string"}, {"name": "n", "type": "number"}],
    }
)
BATCHES = 12
PER_BATCH = 5
LANDING_ROWS = "select delta_id, row_id, hlc from lakesync.landing order by delta_id"
TODOS_ROWS = "select * from analytics.todos order by gateway_id, row_id"


def _batch(b: int, size: int = PER_BATCH, prefix: str = "r") -> list[RowDelta]:
    # Every other batch updates the previous batch's rows, so the models merge, not only insert.
    return [
        RowDelta.create(
            "INSERT",
            "todos",
            f"{prefix}{(b - b % 2) * size + i}",
            "c1",
            {"title": f"t{b}-{i}", "n": b},
            1_000 + b * size + i,
        )
        for i in range(size)
    ]


@pytest.fixture(scope="module")
def landed(lake: Lake) -> dict[str, Any]:
    """Many small landing batches (one commit each), then one pipeline run; the landing snapshot
    of the third batch and the row count it saw."""
    publish_schemas(open_catalog(lake.settings), [(GW, TODOS)])
    early: tuple[int, int] | None = None
    for b in range(BATCHES):
        lake.land(GW, _batch(b))
        if b == 2:
            snap = open_catalog(lake.settings).load_table(LANDING_IDENTIFIER).current_snapshot()
            assert snap is not None
            early = (snap.snapshot_id, len(lake.rows(LANDING_ROWS)))
    run_pipeline(settings=lake.settings, tests=False)
    assert early is not None
    return {"early_snapshot": early[0], "early_rows": early[1]}


def _files(lake: Lake, table: str) -> int:
    """Live data files, from Iceberg's ``.files`` metadata table (content 0 = data)."""
    row = lake.spark.sql(f"select count(*) as n from {table}.files where content = 0").first()
    assert row is not None
    return int(row["n"])


def test_compact_cli_drops_files_and_keeps_results_and_time_travel(
    lake: Lake, landed: dict[str, Any]
) -> None:
    landing_before, todos_before = lake.rows(LANDING_ROWS), lake.rows(TODOS_ROWS)
    files_before = _files(lake, LANDING_IDENTIFIER)
    assert files_before >= BATCHES

    result = CliRunner().invoke(app, ["compact", "--data-dir", str(lake.settings.data_dir)])

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    landing_line = next(line for line in lines if line.startswith(f"{LANDING_IDENTIFIER}: "))
    assert landing_line.startswith(f"{LANDING_IDENTIFIER}: {files_before} → 1 data files")
    assert any(line.startswith("analytics.todos: ") for line in lines)
    assert any(line.startswith("lakesync.int_rows_merged: ") for line in lines)
    assert "tables maintained" in lines[-1]
    assert "WARN" not in result.output and "INFO" not in result.output  # no Spark log noise

    assert _files(lake, LANDING_IDENTIFIER) == 1
    assert lake.rows(LANDING_ROWS) == landing_before
    assert lake.rows(TODOS_ROWS) == todos_before
    # Time travel within the retention (7 days by default) still answers, from the old files.
    early = lake.rows(f"select * from lakesync.landing version as of {landed['early_snapshot']}")
    assert len(early) == landed["early_rows"]


def test_snapshots_older_than_the_retention_are_expired_and_landing_goes_on(
    lake: Lake, landed: dict[str, Any]
) -> None:
    catalog = open_catalog(lake.settings)
    position = landing_state(catalog.load_table(LANDING_IDENTIFIER))
    rows_before = lake.rows(TODOS_ROWS)

    result = compact(replace(lake.settings, snapshot_retention_s=0))

    by_table = {t.table: t for t in result.tables}
    assert by_table["analytics.todos"].snapshots_after == 1
    landing = by_table[LANDING_IDENTIFIER]
    assert landing.snapshots_after < landing.snapshots_before
    table = catalog.load_table(LANDING_IDENTIFIER)
    assert table.snapshot_by_id(landed["early_snapshot"]) is None
    with pytest.raises(Exception, match="snapshot"):
        lake.rows(f"select * from lakesync.landing version as of {landed['early_snapshot']}")
    # The snapshot recording the flushed position survives: the flusher resumes from it and
    # lands only the new batch, and the pipeline still merges on top of the models.
    assert landing_state(table) == position
    count = len(lake.rows(LANDING_ROWS))
    lake.land(GW, _batch(0, prefix="late"))
    assert len(lake.rows(LANDING_ROWS)) == count + PER_BATCH
    run_pipeline(settings=lake.settings, tests=False)
    assert len(lake.rows(TODOS_ROWS)) == len(rows_before) + PER_BATCH


def test_compaction_loses_no_batch_landed_while_it_runs(lake: Lake, landed: dict[str, Any]) -> None:
    before = len(lake.rows(LANDING_ROWS))
    for b in range(6):  # small files again, so the rewrite has work to race with
        lake.land(GW, _batch(b, prefix="pre"))
    stop = threading.Event()
    batches: list[int] = []
    landed_while: list[int] = []

    def append() -> None:
        while not stop.is_set():
            b = len(batches)
            batches.append(b)
            try:
                lake.land(GW, _batch(b, size=3, prefix="during"))
            except Exception:  # lost a commit race: the batch waits in the hot log, as it would
                continue  # for the gateway's flusher, and the next flush lands it
            landed_while.append(b)

    started_ms = int(time.time() * 1000)
    thread = threading.Thread(target=append)
    thread.start()
    try:
        result = compact(lake.settings)
    finally:
        stop.set()
        thread.join()
    lake.land(GW, [])  # flush whatever a lost race left in the hot log

    assert landed_while, "no batch landed while compacting"
    assert result.tables[0].table == LANDING_IDENTIFIER
    # The rewrite committed (replacing small files) while batches landed around it.
    table = open_catalog(lake.settings).load_table(LANDING_IDENTIFIER)
    rewrites = [
        snap
        for snap in table.snapshots()
        if snap.timestamp_ms >= started_ms
        and snap.summary is not None
        and int(snap.summary.additional_properties.get("deleted-data-files", "0")) > 0
    ]
    assert rewrites
    rows = lake.rows(LANDING_ROWS)
    assert len(rows) == before + 6 * PER_BATCH + 3 * len(batches)
    assert len({r["delta_id"] for r in rows}) == len(rows)


def test_dbt_run_operation_maintains_every_table(lake: Lake, landed: dict[str, Any]) -> None:
    """``dbt run-operation lakesync_maintenance`` by hand: every table, the position kept."""
    for b in range(4):
        lake.land(GW, _batch(b, prefix="by-hand"))
    catalog = open_catalog(lake.settings)
    position = landing_state(catalog.load_table(LANDING_IDENTIFIER))
    rows = lake.rows(LANDING_ROWS)
    assert _files(lake, LANDING_IDENTIFIER) > 1

    dbt_invoke(lake.settings, ["run-operation", "lakesync_maintenance"])

    assert _files(lake, LANDING_IDENTIFIER) == 1
    assert lake.rows(LANDING_ROWS) == rows
    assert landing_state(catalog.load_table(LANDING_IDENTIFIER)) == position


HOOKED_MODEL = """\
{{ config(materialized='incremental', incremental_strategy='append', schema='analytics',
          post_hook="{{ lakesync_maintain_table(this) }}") }}
select cast(100 as bigint) as id, 'from dbt' as title
"""


def test_a_model_with_the_maintenance_post_hook_is_maintained_by_dbt_run(
    lake: Lake, landed: dict[str, Any]
) -> None:
    """``macros/maintenance.sql`` as a post-hook, as its header documents: ``dbt run`` builds the
    model (one more small file) and the hook then compacts the table's small files into one; the
    rows are kept. (Without the hook the table ends with five files.)"""
    probe = "analytics.hook_probe"
    lake.spark.sql(f"create table {probe} (id bigint, title string) using iceberg")
    for i in range(4):  # one commit, one small data file each
        lake.spark.sql(f"insert into {probe} values ({i}, 'before')")
    assert _files(lake, probe) == 4
    generated = prepare_project(lake.settings.dbt_project_dir, lake.settings.dbt_run_project_dir)
    model = generated / "hook_probe.sql"
    model.write_text(HOOKED_MODEL, encoding="utf-8")
    try:
        dbt_invoke(lake.settings, ["run", "--select", "hook_probe"])
        assert _files(lake, probe) == 1
        rows = lake.rows(f"select id, title from {probe} order by id")
        assert [(r["id"], r["title"]) for r in rows] == [
            *((i, "before") for i in range(4)), (100, "from dbt")]
    finally:
        model.unlink()
        lake.spark.sql(f"drop table {probe} purge")


def test_a_late_landing_expired_by_compaction_still_reaches_the_models(
    lake: Lake, landed: dict[str, Any]
) -> None:
    """A held-back gateway's rows land late (behind the models' watermark); compaction with a zero
    retention then expires that commit's snapshot before the pipeline runs: the next run must still
    rebuild and merge them (the late mark outlives the snapshot)."""
    catalog = open_catalog(lake.settings)
    table_dir = urlparse(catalog.load_table(LANDING_IDENTIFIER).location()).path
    blocker = Path(table_dir) / "data" / "gateway_id=gw_late"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a directory: gw_late's rows cannot be written")
    late = [
        RowDelta.create("INSERT", "todos", f"late{i}", "c1", {"title": "late"}, 50 + i)
        for i in range(3)
    ]
    on_time = [
        RowDelta.create("INSERT", "todos", f"on{i}", "c1", {"title": "on time"}, 90_000 + i)
        for i in range(3)
    ]
    append_in_order(lake.log, [("gw_late", d) for d in late])
    append_in_order(lake.log, [(GW, d) for d in on_time])
    publish_schemas(catalog, [(GW, TODOS), ("gw_late", TODOS)])
    assert LandingFlusher(open_catalog(lake.settings), lake.log).flush().held == ("gw_late",)
    run_pipeline(settings=lake.settings, tests=False)
    blocker.unlink()
    assert LandingFlusher(open_catalog(lake.settings), lake.log).flush().held == ()
    # A later flush records the position anew, so expiry may drop the late commit's snapshot.
    lake.land(GW, [RowDelta.create("INSERT", "todos", "after", "c1", {"title": "x"}, 95_000)])

    compact(replace(lake.settings, snapshot_retention_s=0))

    landing = open_catalog(lake.settings).load_table(LANDING_IDENTIFIER)
    assert not any(  # the late commit's own snapshot is gone
        s.summary is not None and LANDED_LATE_PROPERTY in s.summary.additional_properties
        for s in landing.snapshots()
    )
    run_pipeline(settings=lake.settings, tests=False)
    rows = lake.rows("select row_id from analytics.todos where gateway_id = 'gw_late'")
    assert sorted(r["row_id"] for r in rows) == ["late0", "late1", "late2"]
