"""`lakesync query --as-of / --snapshot`: DuckDB over earlier Iceberg snapshots, no Spark."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

import pyarrow as pa
import pytest
from pyiceberg.table import Table
from typer.testing import CliRunner, Result

from lakesync.cli.main import app
from lakesync.delta import RowDelta
from lakesync.errors import NotFoundError
from lakesync.hlc import HLC
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.lakehouse.bootstrap import init_catalog_tables
from lakesync.lakehouse.catalog import LANDING_IDENTIFIER, open_catalog
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.query import connect, run_query
from lakesync.lakehouse.settings import LakeSettings

from .conftest import append_in_order

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
LANDED = "select row_id from lakesync.landing order by ingest_hlc"
TODOS = "select id from analytics.todos order by id"


@dataclass(frozen=True)
class Snapshot:
    id: int
    at: datetime  # the snapshot's commit time, exact to the millisecond


@dataclass(frozen=True)
class Lake:
    """Landing batches [a, b], [c], [d] (one snapshot each); analytics.todos born after [c]."""

    settings: LakeSettings
    landing: list[Snapshot]
    todos: list[Snapshot]


def _snapshot(table: Table) -> Snapshot:
    snap = table.current_snapshot()
    assert snap is not None
    return Snapshot(snap.snapshot_id, EPOCH + timedelta(milliseconds=snap.timestamp_ms))


def _tick() -> None:
    # Snapshots a few ms apart, so "one ms before the next snapshot" is after this one.
    time.sleep(0.005)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    root = tmp_path_factory.mktemp("lake")
    settings = LakeSettings.from_env(root / "data", env={})
    init_catalog_tables(settings)
    (root / "data" / "warehouse").mkdir()
    catalog = open_catalog(settings)
    log = SqliteHotLog(root / "hot.sqlite3", HLC())
    flusher = LandingFlusher(catalog, log)
    landing: list[Snapshot] = []
    todos: list[Snapshot] = []
    pos = 0
    for batch in (["a", "b"], ["c"], ["d"]):
        _tick()
        entries = []
        for row in batch:
            pos += 1
            delta = RowDelta.create("INSERT", "todos", row, "c1", {"title": row}, 1000 + pos)
            entries.append(("gw1", delta))
        append_in_order(log, entries)
        assert flusher.flush().commits == 1
        landing.append(_snapshot(catalog.load_table(LANDING_IDENTIFIER)))
        if batch == ["c"]:
            # A second table, created between landing's second and third snapshot.
            _tick()
            catalog.create_namespace("analytics")
            schema = pa.schema([pa.field("id", pa.string(), nullable=False)])
            table = catalog.create_table("analytics.todos", schema=schema)
            for ids in (["x"], ["y"]):
                _tick()
                table.append(pa.table({"id": ids}, schema=schema))
                todos.append(_snapshot(table))
    log.close()
    return Lake(settings, landing, todos)


def _rows(
    lake: Lake, sql: str, as_of: datetime | None = None, snapshots: dict[str, int] | None = None
) -> list[str]:
    return [r[0] for r in run_query(lake.settings, sql, as_of=as_of, snapshots=snapshots).rows]


def _cli(lake: Lake, *args: str) -> Result:
    return CliRunner().invoke(app, ["query", "--data-dir", str(lake.settings.data_dir), *args])


def _said(out: Result) -> str:
    return " ".join(out.output.split())  # rich wraps long messages


def _failed_cleanly(out: Result, code: int) -> None:
    assert out.exit_code == code, out.output
    assert isinstance(out.exception, SystemExit), out.exception  # not an unhandled error
    assert "Traceback" not in out.output


def test_the_snapshot_ids_and_times_are_distinct(lake: Lake) -> None:
    # The fixture's premise: every later test relies on strictly increasing snapshot times.
    times = [s.at for s in lake.landing]
    assert times == sorted(times) and len(set(times)) == 3
    assert lake.landing[1].at < lake.todos[0].at < lake.todos[1].at < lake.landing[2].at


def test_without_time_travel_every_row_is_visible(lake: Lake) -> None:
    assert _rows(lake, LANDED) == ["a", "b", "c", "d"]
    assert _rows(lake, TODOS) == ["x", "y"]


@pytest.mark.parametrize(("k", "expected"), [(0, ["a", "b"]), (1, ["a", "b", "c"])])
def test_as_of_shows_the_snapshot_current_at_that_instant(
    lake: Lake, k: int, expected: list[str]
) -> None:
    at, next_at = lake.landing[k].at, lake.landing[k + 1].at
    assert _rows(lake, LANDED, as_of=at) == expected  # the commit instant itself is included
    assert _rows(lake, LANDED, as_of=next_at - timedelta(milliseconds=1)) == expected
    assert _rows(lake, "select row_id from landing order by row_id", as_of=at) == expected


def test_as_of_applies_to_every_table(lake: Lake) -> None:
    at = lake.todos[0].at
    assert _rows(lake, TODOS, as_of=at) == ["x"]
    assert _rows(lake, LANDED, as_of=at) == ["a", "b", "c"]


@pytest.fixture
def local_time_is_not_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # So "naive means UTC" cannot pass by accident on a machine whose local time is UTC.
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("local_time_is_not_utc")
def test_naive_and_offset_instants_mean_the_same_utc_instant(lake: Lake) -> None:
    at = lake.landing[0].at
    naive = at.replace(tzinfo=None)
    plus_two = at.astimezone(timezone(timedelta(hours=2)))
    assert _rows(lake, LANDED, as_of=naive) == ["a", "b"]
    assert _rows(lake, LANDED, as_of=plus_two) == ["a", "b"]


def test_a_table_younger_than_as_of_has_no_view(lake: Lake) -> None:
    at = lake.landing[1].at  # before analytics.todos's first snapshot
    con = connect(lake.settings, as_of=at)
    try:
        views = con.execute(
            "select table_schema || '.' || table_name from information_schema.tables"
        ).fetchall()
    finally:
        con.close()
    assert ("lakesync.landing",) in views and ("analytics.todos",) not in views
    with pytest.raises(NotFoundError, match=r"analytics\.todos had no snapshot at or before"):
        run_query(lake.settings, TODOS, as_of=at)


def test_before_the_first_snapshot_the_landing_table_is_absent(lake: Lake) -> None:
    before = lake.landing[0].at - timedelta(milliseconds=1)
    with pytest.raises(NotFoundError, match=r"lakesync\.landing had no snapshot"):
        run_query(lake.settings, LANDED, as_of=before)
    with pytest.raises(NotFoundError, match=r"lakesync\.landing had no snapshot"):
        run_query(lake.settings, "select * from landing", as_of=before)
    assert run_query(lake.settings, "select 1", as_of=before).rows == [(1,)]


def test_snapshot_pins_one_table_and_wins_over_as_of(lake: Lake) -> None:
    first = lake.landing[0].id
    assert _rows(lake, LANDED, snapshots={"lakesync.landing": first}) == ["a", "b"]
    assert _rows(lake, TODOS, snapshots={"lakesync.landing": first}) == ["x", "y"]
    latest = lake.landing[2].at
    pinned = {"lakesync.landing": lake.landing[1].id}
    assert _rows(lake, LANDED, as_of=latest, snapshots=pinned) == ["a", "b", "c"]
    # A pin shows its table even where as_of predates it.
    early = lake.landing[1].at
    assert _rows(lake, TODOS, as_of=early, snapshots={"analytics.todos": lake.todos[0].id}) == [
        "x"
    ]


def test_unknown_table_or_snapshot_is_not_found(lake: Lake) -> None:
    with pytest.raises(NotFoundError, match=r"no table analytics\.nope .*lakesync\.landing"):
        run_query(lake.settings, "select 1", snapshots={"analytics.nope": 1})
    with pytest.raises(NotFoundError, match=r"no table landing"):
        run_query(lake.settings, "select 1", snapshots={"landing": lake.landing[0].id})
    with pytest.raises(NotFoundError, match=r"lakesync\.landing has no snapshot 12345; newest"):
        run_query(lake.settings, "select 1", snapshots={"lakesync.landing": 12345})


@pytest.mark.usefixtures("local_time_is_not_utc")
def test_cli_as_of_accepts_iso_8601_with_z_offset_or_naive(lake: Lake) -> None:
    at = lake.landing[1].at
    for text in (
        at.isoformat().replace("+00:00", "Z"),
        at.replace(tzinfo=None).isoformat(sep=" "),
        at.astimezone(timezone(timedelta(hours=-5))).isoformat(),
    ):
        out = _cli(lake, "--as-of", text, "--format", "json", LANDED)
        assert out.exit_code == 0, out.output
        assert [json.loads(line)["row_id"] for line in out.stdout.splitlines()] == ["a", "b", "c"]


def test_cli_snapshot_is_repeatable(lake: Lake) -> None:
    out = _cli(
        lake,
        "--snapshot", f"lakesync.landing={lake.landing[0].id}",
        "--snapshot", f"analytics.todos={lake.todos[0].id}",
        "--format", "csv",
        "select (select count(*) from landing) as landed, (select count(*) from analytics.todos)"
        " as todos",
    )
    assert out.exit_code == 0, out.output
    assert out.stdout.splitlines() == ["landed,todos", "2,1"]


def test_cli_table_absent_at_as_of_is_a_clean_error(lake: Lake) -> None:
    before = (lake.landing[0].at - timedelta(seconds=1)).isoformat()
    out = _cli(lake, "--as-of", before, LANDED)
    _failed_cleanly(out, 1)
    assert "lakesync.landing had no snapshot at or before" in _said(out)


@pytest.mark.parametrize(
    ("pin", "message"),
    [
        ("analytics.nope=1", "no table analytics.nope in the lake"),
        ("lakesync.landing=12345", "lakesync.landing has no snapshot 12345"),
    ],
)
def test_cli_unknown_table_or_snapshot_exits_1(lake: Lake, pin: str, message: str) -> None:
    out = _cli(lake, "--snapshot", pin, "select 1")
    _failed_cleanly(out, 1)
    assert message in _said(out)


@pytest.mark.parametrize(
    "args",
    [
        ["--as-of", "yesterday"],
        ["--as-of", "2026-13-01T00:00:00Z"],
        ["--snapshot", "lakesync.landing"],
        ["--snapshot", "lakesync.landing=abc"],
        ["--snapshot", "=123"],
        ["--snapshot", "lakesync.landing=1", "--snapshot", "lakesync.landing=2"],
    ],
)
def test_cli_malformed_flags_are_bad_parameters(lake: Lake, args: list[str]) -> None:
    out = _cli(lake, *args, "select 1")
    _failed_cleanly(out, 2)
    assert ("--as-of" if args[0] == "--as-of" else "--snapshot") in out.output
    assert "Invalid value" in out.output

