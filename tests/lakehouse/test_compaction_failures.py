"""``lakesync compact`` maintains every table whatever one table does.

Real parts: Spark + dbt in this process, the Iceberg procedures, the CLI. Tables sort after the
landing table by name, so the empty and the broken one come before the one with data.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pytest
from typer.testing import CliRunner

from lakesync.cli.main import app
from lakesync.lakehouse.catalog import LANDING_IDENTIFIER, open_catalog

from .conftest import Lake

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]


def _files(lake: Lake, table: str) -> int:
    row = lake.spark.sql(f"select count(*) as n from {table}.files where content = 0").first()
    assert row is not None
    return int(row["n"])


def test_compact_maintains_the_tables_after_an_empty_and_a_broken_one(lake: Lake) -> None:
    # An empty table with a snapshot listing no manifest: what an empty change set is.
    lake.spark.sql("create table analytics.aaa_empty using iceberg as select 1 as x where false")
    lake.spark.sql("create table analytics.bbb_broken (x int) using iceberg")
    lake.spark.sql("insert into analytics.bbb_broken values (1)")
    lake.spark.sql("create table analytics.zzz_full (x int) using iceberg")
    for n in range(4):
        lake.spark.sql(f"insert into analytics.zzz_full values ({n})")
    assert _files(lake, "analytics.zzz_full") == 4
    # A table whose metadata file is gone: its maintenance fails, the others' must not.
    broken = open_catalog(lake.settings).load_table("analytics.bbb_broken")
    Path(urlparse(broken.metadata_location).path).unlink()

    result = CliRunner().invoke(app, ["compact", "--data-dir", str(lake.settings.data_dir)])

    lines = result.stdout.splitlines()
    assert any(line.startswith(f"{LANDING_IDENTIFIER}: ") for line in lines), result.output
    assert "analytics.aaa_empty: 0 → 0 data files" in result.stdout, result.output
    assert any(line.startswith("analytics.bbb_broken: failed: ") for line in lines), lines
    assert any(line.startswith("analytics.zzz_full: 4 → 1 data files") for line in lines), lines
    assert _files(lake, "analytics.zzz_full") == 1
    # The command fails, naming the table, after maintaining the rest.
    assert result.exit_code == 1, result.output
    assert "1 of" in result.output and "analytics.bbb_broken" in result.output
