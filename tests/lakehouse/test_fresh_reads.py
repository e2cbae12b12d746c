"""Fresh reads without gaps, no Spark: the landing and hot-log positions a fresh read uses are
the ones of the snapshots its views read, so a landing flush between making the views and
reading the positions loses nothing; a registered table the pipeline has not built yet is
answered from landing + hot log. Each on the embedded SQLite catalog and on a real Iceberg REST
catalog server (``lakesync query --fresh`` through REST)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.lakehouse.bootstrap import init_catalog_tables
from lakesync.lakehouse.catalog import ensure_landing_table, open_catalog
from lakesync.lakehouse.connection import pinned_connection
from lakesync.lakehouse.fresh import freshen
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.query import run_query
from lakesync.lakehouse.registry import publish_schemas
from lakesync.lakehouse.settings import LakeSettings
from lakesync.schema import parse_schema
from tests.api.helpers import now_hlc
from tests.rest_catalog import rest_catalog_server

GW = "gwf"
NOTES = parse_schema({"table": "notes", "columns": [
    {"name": "body", "type": "string"}, {"name": "stars", "type": "number"}]})
SQL = "select row_id, body, stars from analytics.notes order by row_id"


@pytest.fixture(params=["sqlite", "rest"])
def lake(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[LakeSettings, Any]]:
    """A lake with no pipeline run (no Spark) and its hot log; ``notes`` registered. Its
    catalog is the embedded SQLite one or a REST catalog server of its own."""
    monkeypatch.delenv("LAKESYNC_CONFIG", raising=False)
    with contextlib.ExitStack() as stack:
        env = {}
        if request.param == "rest":
            env["LAKESYNC_CATALOG_URI"] = stack.enter_context(
                rest_catalog_server(tmp_path / "rest")
            )
        settings = LakeSettings.from_env(tmp_path, env=env)
        init_catalog_tables(settings)
        catalog = open_catalog(settings)
        ensure_landing_table(catalog)
        publish_schemas(catalog, [(GW, NOTES)])
        log = SqliteHotLog(tmp_path / "hotlog.sqlite3", HLC())
        try:
            yield settings, log
        finally:
            log.close()


def _d(op: str, row: str, hlc: int, **cols: Any) -> RowDelta:
    return RowDelta.create(op, "notes", row, "c1", cols, hlc)  # type: ignore[arg-type]


def test_a_table_the_pipeline_has_not_built_is_answered_from_landing_and_hot_log(
    lake: tuple[LakeSettings, Any],
) -> None:
    """No ``analytics.notes`` yet: ``--fresh`` used to fail naming an internal view; now it
    answers from the landing table and the hot log (and an empty table reads empty)."""
    settings, log = lake
    assert run_query(settings, SQL, fresh=True, hot_log=log).rows == []
    t = now_hlc()
    log.append(GW, [_d("INSERT", "n1", t + 1, body="landed", stars=1)])
    log.append(GW, [_d("INSERT", "n2", t + 2, body="gone")])
    LandingFlusher(open_catalog(settings), log).flush()
    log.append(GW, [_d("UPDATE", "n1", t + 3, body="hot")])
    log.append(GW, [_d("DELETE", "n2", t + 4)])
    log.append(GW, [_d("INSERT", "n3", t + 5, stars=3)])
    assert run_query(settings, SQL, fresh=True, hot_log=log).rows == [
        ("n1", "hot", 1.0), ("n3", None, 3.0)]
    assert run_query(settings, SQL, fresh=True).rows == [
        ("n1", "landed", 1.0), ("n2", "gone", None)]


def test_a_landing_flush_after_the_views_are_made_leaves_no_gap(
    lake: tuple[LakeSettings, Any],
) -> None:
    """Driven in order: the views are made (landing pinned with the old value), an update is
    flushed to landing, then the fresh read takes its positions. The landing position must be
    the pinned snapshot's, so the update is read from the hot log; read from the catalog then,
    it says the update is landed, which the pinned landing view does not hold (the old value
    came back)."""
    settings, log = lake
    t = now_hlc()
    log.append(GW, [_d("INSERT", "n1", t + 1, body="old", stars=1)])
    LandingFlusher(open_catalog(settings), log).flush()
    con, _, pinned = pinned_connection(settings, None, {})
    try:
        log.append(GW, [_d("UPDATE", "n1", t + 2, body="new")])
        LandingFlusher(open_catalog(settings), log).flush()  # between pinning and reading
        freshen(con, settings, log, pinned)
        assert con.execute(SQL).fetchall() == [("n1", "new", 1.0)]
    finally:
        con.close()
