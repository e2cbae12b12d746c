"""``lakesync query --fresh``: the current-state tables plus the deltas not merged yet (landed
after the last pipeline run, or still only in the hot log) equal the reference merge."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from lakesync.canonical import canonical_json
from lakesync.cli.main import app
from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.connection import pinned_connection
from lakesync.lakehouse.fresh import freshen
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.query import run_query
from lakesync.lakehouse.registry import publish_schemas
from lakesync.lakehouse.runner import run_pipeline
from lakesync.merge import merge_state
from lakesync.schema import parse_schema
from tests.api.helpers import now_hlc
from tests.lakehouse.conftest import Lake, append_in_order, make_lake

pytestmark = [pytest.mark.spark, pytest.mark.slow]

GW = "gwfresh"
NOTES = parse_schema(
    {
        "table": "notes",
        "columns": [
            {"name": "body", "type": "string"},
            {"name": "stars", "type": "number"},
            {"name": "done", "type": "boolean"},
            {"name": "tags", "type": "json"},
        ],
    }
)
SQL = (
    "select row_id, body, stars, done, tags from analytics.notes"
    f" where gateway_id = '{GW}' order by row_id"
)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    lk = make_lake(tmp_path_factory.mktemp("fresh"))
    yield lk
    lk.spark.stop()


def _d(op: str, row: str, client: str, hlc: int, **cols: Any) -> RowDelta:
    return RowDelta.create(op, "notes", row, client, cols, hlc)  # type: ignore[arg-type]


def _expected(deltas: list[RowDelta]) -> list[tuple[Any, ...]]:
    def text(v: Any) -> str | None:
        return None if v is None else canonical_json(v)

    rows = merge_state(deltas)
    return [
        (
            r,
            v.get("body"),
            None if v.get("stars") is None else float(v["stars"]),
            v.get("done"),
            text(v.get("tags")),
        )
        for (_, r), v in sorted(rows.items())
    ]


def test_fresh_reads_include_landed_and_hot_deltas(lake: Lake, tmp_path: Path) -> None:
    log = SqliteHotLog(tmp_path / "hot.sqlite3", HLC())
    catalog = open_catalog(lake.settings)
    publish_schemas(catalog, [(GW, NOTES)])
    t = now_hlc()
    merged = [
        _d("INSERT", "n1", "a", t + 1, body="one", stars=1, done=False, tags=["x"]),
        _d("INSERT", "n2", "a", t + 2, body="two", stars=2),
        _d("INSERT", "n3", "b", t + 3, body="three", tags={"k": 1}),
    ]
    landed = [
        _d("UPDATE", "n1", "b", t + 10, stars=5),
        _d("UPDATE", "n1", "c", t, body="late, loses"),  # older than n1's INSERT
        _d("DELETE", "n2", "b", t + 11),
        _d("INSERT", "n4", "c", t + 12, body="four", done=True),
    ]
    hot = [
        _d("UPDATE", "n3", "a", t + 20, body="three!", tags=None),
        _d("DELETE", "n4", "a", t + 21),
        _d("UPDATE", "n4", "b", t + 22, stars=4),  # revives n4 with only its new cell
        _d("INSERT", "n5", "a", t + 23, body="five"),
    ]
    try:
        for d in merged:
            log.append(GW, [d])
        LandingFlusher(catalog, log).flush()
        run_pipeline(settings=lake.settings, schemas=[NOTES], tests=False)
        for d in landed:
            log.append(GW, [d])
        LandingFlusher(catalog, log).flush()
        for d in hot:
            log.append(GW, [d])

        assert run_query(lake.settings, SQL).rows == _expected(merged)
        fresh = run_query(lake.settings, SQL, fresh=True, hot_log=log).rows
        assert fresh == _expected(merged + landed + hot)
        # Without the hot log: what the landing table holds.
        assert run_query(lake.settings, SQL, fresh=True).rows == _expected(merged + landed)
    finally:
        log.close()


def test_the_query_command_with_fresh_prints_deltas_pushed_after_the_last_run(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``lakesync query --fresh`` (the CLI, reading the data dir's own hot log) prints the
    reference merge, with the deltas landed or still hot after the last pipeline run."""
    monkeypatch.delenv("LAKESYNC_CONFIG", raising=False)
    monkeypatch.delenv("LAKESYNC_STORE_URL", raising=False)
    gw = "gwfreshcli"
    sql = SQL.replace(f"'{GW}'", f"'{gw}'")
    publish_schemas(open_catalog(lake.settings), [(gw, NOTES)])
    t = now_hlc()
    merged = [
        _d("INSERT", "c1", "a", t + 1, body="one", stars=1, done=False, tags=["x"]),
        _d("INSERT", "c2", "a", t + 2, body="two", stars=2),
    ]
    landed = [_d("UPDATE", "c1", "b", t + 10, stars=5), _d("DELETE", "c2", "b", t + 11)]
    hot = [
        _d("UPDATE", "c1", "c", t + 20, body="one!", tags={"k": 1}),
        _d("INSERT", "c3", "a", t + 21, body="three", done=True),
    ]
    # lake.log is the data dir's hotlog.sqlite3: the hot log the command opens by itself.
    append_in_order(lake.log, [(gw, d) for d in merged])
    LandingFlusher(open_catalog(lake.settings), lake.log).flush()
    run_pipeline(settings=lake.settings, schemas=[NOTES], tests=False)
    lake.land(gw, landed)
    append_in_order(lake.log, [(gw, d) for d in hot])

    def printed(*flags: str) -> list[tuple[Any, ...]]:
        args = ["query", sql, "--data-dir", str(lake.settings.data_dir), "--format", "json"]
        result = CliRunner().invoke(app, [*args, *flags])
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        return [(r["row_id"], r["body"], r["stars"], r["done"], r["tags"]) for r in rows]

    assert printed() == _expected(merged)
    assert printed("--fresh") == _expected(merged + landed + hot)
    assert printed("--fresh") != _expected(merged + landed)  # the hot deltas count


def _pinned(lake: Lake) -> tuple[Any, dict[str, Any]]:
    """The views of a fresh read, made now (the first step of ``run_query(fresh=True)``)."""
    con, _, pinned = pinned_connection(lake.settings, None, {})
    return con, pinned


def test_a_flush_between_making_the_views_and_reading_positions_leaves_no_gap(
    lake: Lake, tmp_path: Path
) -> None:
    """Driven in order: a pipeline run built ``analytics.notes``; an update is pushed; the
    views are made; the update is flushed to landing; then the fresh read takes its positions.
    Read from the catalog at that point, the landing position said the update had landed, but
    the pinned landing view does not hold it: the old value came back."""
    gw = "gwflushrace"
    sql = SQL.replace(f"'{GW}'", f"'{gw}'")
    publish_schemas(open_catalog(lake.settings), [(gw, NOTES)])
    t = now_hlc()
    lake.land(gw, [_d("INSERT", "f1", "a", t + 1, body="old", stars=1)])
    run_pipeline(settings=lake.settings, schemas=[NOTES], tests=False)
    update = _d("UPDATE", "f1", "b", t + 2, body="new")
    append_in_order(lake.log, [(gw, update)])
    con, pinned = _pinned(lake)
    try:
        LandingFlusher(open_catalog(lake.settings), lake.log).flush()
        freshen(con, lake.settings, lake.log, pinned)
        assert [r[:2] for r in con.execute(sql).fetchall()] == [("f1", "new")]
    finally:
        con.close()
    assert [r[:2] for r in run_query(lake.settings, sql, fresh=True).rows] == [("f1", "new")]


def test_a_pipeline_run_between_making_the_views_and_reading_positions_leaves_no_gap(
    lake: Lake,
) -> None:
    """Driven in order: the views are made (``analytics.notes`` with the old value), an update
    lands and a pipeline run merges it, then the fresh read takes its positions. Read from the
    catalog then, the covered position said the models hold the update, which the pinned views
    do not: the old value came back."""
    gw = "gwrunrace"
    sql = SQL.replace(f"'{GW}'", f"'{gw}'")
    publish_schemas(open_catalog(lake.settings), [(gw, NOTES)])
    t = now_hlc()
    lake.land(gw, [_d("INSERT", "p1", "a", t + 1, body="old", stars=1)])
    run_pipeline(settings=lake.settings, schemas=[NOTES], tests=False)
    con, pinned = _pinned(lake)
    try:
        lake.land(gw, [_d("UPDATE", "p1", "b", t + 2, body="new")])
        run_pipeline(settings=lake.settings, schemas=[NOTES], tests=False)
        freshen(con, lake.settings, lake.log, pinned)
        assert [r[:2] for r in con.execute(sql).fetchall()] == [("p1", "new")]
    finally:
        con.close()


def test_a_column_added_since_the_last_run_reads_fresh(lake: Lake) -> None:
    """A column registered after the last pipeline run is not in ``analytics.notes`` yet: a
    fresh read shows it (null in the rows not touched since, the new value in a row that was)
    rather than failing on an internal view."""
    gw = "gwnewcol"
    wider = parse_schema({"table": "notes", "columns": [
        *({"name": c.name, "type": c.type} for c in NOTES.columns),
        {"name": "mood", "type": "string"},
    ]})
    t = now_hlc()
    publish_schemas(open_catalog(lake.settings), [(gw, NOTES)])
    lake.land(gw, [_d("INSERT", "m1", "a", t + 1, body="one"),
                   _d("INSERT", "m2", "a", t + 2, body="two")])
    run_pipeline(settings=lake.settings, schemas=[NOTES], tests=False)
    publish_schemas(open_catalog(lake.settings), [(gw, wider)])
    append_in_order(lake.log, [(gw, _d("UPDATE", "m2", "b", t + 3, mood="glad"))])
    sql = f"select row_id, body, mood from analytics.notes where gateway_id = '{gw}' order by 1"
    assert run_query(lake.settings, sql, fresh=True, hot_log=lake.log).rows == [
        ("m1", "one", None), ("m2", "two", "glad")]
