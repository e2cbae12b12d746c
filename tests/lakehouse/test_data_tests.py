"""The pipeline's data tests check each run's increment, and a failed run is checked again.

The LWW invariant tests (``lakesync_cells_are_lww_winners``, ``lakesync_row_clocks_are_maxima``
in macros/tests.sql) join landing rows with the merged models. The landing keeps the whole
history, so they read only the landing past what the last *successful* run recorded as complete
(``lakesync.covered`` on ``int_rows_merged``); a full refresh reads everything. The bound is read
back from the test SQL dbt compiled for each run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lakesync.delta import RowDelta
from lakesync.hlc import encode
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.lake_position import COVERED_PROPERTY
from lakesync.lakehouse.runner import PipelineError, run_pipeline
from lakesync.schema import parse_schema

from .conftest import Lake

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

SCHEMA = parse_schema({"table": "items", "columns": [{"name": "title", "type": "string"}]})
GW = "g1"


def _insert(row: str, wall: int) -> RowDelta:
    return RowDelta.create(op="INSERT", table="items", row_id=row, client_id="c1",
                           columns={"title": row}, hlc=encode(1_700_000_000_000 + wall, 0))


def _run(lake: Lake, *, full_refresh: bool = False) -> None:
    assert not _failed(lake, full_refresh=full_refresh)


def _failed(lake: Lake, *, full_refresh: bool = False) -> dict[str, str]:
    """The tables a run failed, and why."""
    return run_pipeline(settings=lake.settings, schemas=[SCHEMA], full_refresh=full_refresh).failed


def _checked_since(lake: Lake) -> int:
    """The landing bound in the last compiled ``lakesync_cells_are_lww_winners``."""
    run_dir = Path(lake.settings.dbt_dir) / "target" / "run"
    [sql] = run_dir.rglob("lakesync_cells_are_lww_winners_*.sql")
    found = re.search(r"s\.ingest_hlc > (-?\d+)", sql.read_text())
    assert found is not None, sql.read_text()
    return int(found.group(1))


def _covered(lake: Lake) -> int:
    """What the last successful run recorded as complete (least of position and held)."""
    merged = open_catalog(lake.settings).load_table("lakesync.int_rows_merged")
    covered = json.loads(merged.properties[COVERED_PROPERTY])
    return min([covered["position"], *covered["held"].values()])


def test_each_run_checks_its_increment_and_a_failed_run_is_checked_again(lake: Lake) -> None:
    lake.land(GW, [_insert("a1", 1), _insert("a2", 2)])
    _run(lake)
    assert _checked_since(lake) == -1  # the first run checks everything
    first = _covered(lake)

    lake.land(GW, [_insert("b1", 3)])
    _run(lake)
    assert _checked_since(lake) == first  # only the landing past the first run
    second = _covered(lake)
    assert second > first

    # A run whose data tests fail on a table fails that table (the run goes on) and records
    # no covered position: the next run checks from the same place.
    lake.spark.sql("delete from analytics.items where row_id = 'a1'")
    lake.land(GW, [_insert("c1", 4)])
    assert "lakesync_live_rows_match" in _failed(lake)["items"]
    assert _checked_since(lake) == second
    lake.land(GW, [_insert("d1", 5)])
    assert "lakesync_live_rows_match" in _failed(lake)["items"]
    assert _checked_since(lake) == second
    assert _covered(lake) == second

    _run(lake, full_refresh=True)  # rebuilds the mart and checks the whole landing
    assert _checked_since(lake) == -1
    assert _covered(lake) > second


def test_a_cell_the_increment_skipped_fails_the_run(lake: Lake) -> None:
    # A stored position past the landing (a position bug) makes the next increment skip new
    # cells: the increment's check finds landed cells with no stored winner.
    lake.land(GW, [_insert("x1", 6)])
    _run(lake)
    lake.spark.sql(
        "update lakesync.int_cells_merged set ingest_hlc = ingest_hlc * 2 where row_id = 'x1'"
    )
    lake.land(GW, [_insert("e1", 7)])
    with pytest.raises(PipelineError, match="lakesync_cells_are_lww_winners"):
        _run(lake)
