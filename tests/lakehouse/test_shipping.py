"""Acceptance: the pipeline's change sets shipped from Spark into PostgreSQL, MariaDB and the
BigQuery emulator (a bulk load job) equal
``merge_state`` (typed; soft and hard delete; ``props`` untouched; in PostgreSQL U+0000 as
U+FFFD) over several pipeline runs of a random history (shuffled, duplicated, late, deletes,
revivals); a second run ships nothing; a failing destination is reported and does not block the
others."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import msgspec
import psycopg
import pymysql
import pytest

from lakesync.config import Config, GatewayConfig
from lakesync.delta import RowDelta
from lakesync.destination_specs import DestinationSpec
from lakesync.destinations.base import normalise_row, typed_change
from lakesync.destinations.factory import mysql_params, open_destination
from lakesync.destinations.statements import Dialect, TableLayout, storable_value
from lakesync.hlc import encode
from lakesync.lakehouse.catalog import lake_catalog
from lakesync.lakehouse.runner import run_pipeline
from lakesync.lakehouse.shipping import ship
from lakesync.merge import merge_state
from lakesync.schema import parse_schema
from tests.conftest import PG_DSN, require_postgres
from tests.destinations.conftest import (
    BIGQUERY_ENDPOINT,
    MYSQL_DSN,
    require_bigquery,
    require_mysql,
)

from .conftest import Lake

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

GW = "gw_dest"
SCHEMA = parse_schema({"table": "shipped", "columns": [
    {"name": "title", "type": "string"},
    {"name": "n", "type": "number"},
    {"name": "done", "type": "boolean"},
    {"name": "meta", "type": "json"},
]})
COLUMNS = [(c.name, c.type) for c in SCHEMA.columns]
ROWS = [f"r{i}" for i in range(40)] + ["R1", "ünï"]


def random_history(rng: random.Random, n: int, base: int) -> list[RowDelta]:
    """Writes and deletes over a few rows by two clients, with colliding clocks."""
    out: list[RowDelta] = []
    for _ in range(n):
        row, client = rng.choice(ROWS), rng.choice(["c1", "c2"])
        hlc = (base + rng.randrange(60)) << 16
        if rng.random() < 0.2:
            out.append(RowDelta.create("DELETE", "shipped", row, client, {}, hlc))
            continue
        cells: dict[str, Any] = {}
        for name, _ in rng.sample(COLUMNS, rng.randint(1, 4)):
            cells[name] = rng.choice({
                "title": ["a", "b", "ç", "n\x00l", None], "n": [1, 2.5, -0.0, None],
                "done": [True, False, None],
                "meta": [{"x": [1]}, [], {"k\x00": ["\x00", "\\u0000"]}, None],
            }[name])
        out.append(RowDelta.create("UPDATE", "shipped", row, client, cells, hlc))
    out += rng.sample(out, len(out) // 10)  # duplicates
    rng.shuffle(out)
    return out


@pytest.fixture
def databases() -> Iterator[tuple[str, str]]:
    """A fresh PostgreSQL database and a fresh MariaDB database (JDBC reaches both by URL)."""
    require_postgres()
    require_mysql()
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'create database "{name}"')
    my = pymysql.connect(**mysql_params(MYSQL_DSN))  # type: ignore[arg-type]
    with my.cursor() as cur:
        cur.execute(f"create database `{name}`")
    pg_url = urlunsplit(urlsplit(PG_DSN)._replace(path=f"/{name}"))
    my_url = urlunsplit(urlsplit(MYSQL_DSN)._replace(path=f"/{name}"))
    try:
        yield pg_url, my_url
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'drop database "{name}" with (force)')
        with my.cursor() as cur:
            cur.execute(f"drop database `{name}`")
        my.close()


def live_rows(spec: DestinationSpec) -> dict[str, dict[str, Any]]:
    with open_destination(spec, env={}) as dest:
        rows = dest.read_rows(dest.layout("shipped", COLUMNS))
    assert all(r["props"] == {} for r in rows)
    return {r["row_id"]: {n: r[n] for n, _ in COLUMNS} for r in rows
            if r.get("deleted_at") is None}


def expected(deltas: list[RowDelta], dialect: Dialect | None = None) -> dict[str, dict[str, Any]]:
    """``merge_state``'s live rows as a ``dialect`` destination stores them (read back: json
    canonical)."""
    layout = TableLayout("shipped", COLUMNS)
    kinds = dict(COLUMNS)
    return {
        row_id: normalise_row(layout, {
            name: value if dialect is None else storable_value(kinds[name], value, dialect)
            for name, value in typed_change(layout, row_id, cells).values.items()
        })
        for (_, row_id), cells in merge_state(deltas).items()
    }


def test_change_sets_ship_to_postgres_mariadb_and_bigquery(
    lake: Lake, databases: tuple[str, str]
) -> None:
    require_bigquery()
    bq_url = f"bigquery://test-project/t_{uuid.uuid4().hex[:12]}?endpoint={BIGQUERY_ENDPOINT}"
    ship_reference_history(lake, databases, bq_url)


def ship_reference_history(
    lake: Lake, databases: tuple[str, str], bq_url: str | None = None
) -> None:
    """Three pipeline runs of a random history (the third batch late), each shipped to
    PostgreSQL (soft delete), MariaDB (hard) and, given ``bq_url``, BigQuery, next to a
    destination that never answers: each holds ``merge_state``'s rows after every run, and a
    further shipment sends nothing. Also run with the warehouse on S3
    (``tests/lakehouse/test_object_store.py``)."""
    pg_url, my_url = databases
    specs = {
        "pg": DestinationSpec("postgres", pg_url, GW, ["shipped"], "soft", name="pg"),
        "maria": DestinationSpec("mysql", my_url, GW, None, "hard", name="maria"),
        "down": DestinationSpec("mysql", "mysql://root@127.0.0.1:1/x", GW, name="down"),
    }
    if bq_url is not None:
        specs["bq"] = DestinationSpec("bigquery", bq_url, GW, None, "soft", name="bq")
    shipped = [n for n in ("pg", "maria", "bq") if n in specs]
    config = Config(data_dir=lake.settings.data_dir, jwt_secrets=[],
                    gateways={GW: GatewayConfig(GW, [SCHEMA])}, destinations=specs)
    rng = random.Random(7)
    landed: list[RowDelta] = []
    for run, base in enumerate([1000, 1030, 1010]):  # the third batch is late
        batch = random_history(rng, 150, base)
        lake.land(GW, batch)
        landed += batch
        run_pipeline(settings=lake.settings, schemas=[SCHEMA], tests=False, config=config)
        results = {r.destination: r for r in ship(lake.settings, config, spark=lake.spark)}
        assert results["down"].error and "cannot connect" in results["down"].error
        assert all(results[n].error is None for n in shipped), results
        assert results["pg"].rows > 0 and results["pg"].position is not None
        want = expected(landed)
        assert live_rows(specs["pg"]) == expected(landed, "postgres"), f"run {run}"
        assert live_rows(specs["maria"]) == want, f"run {run}"
        if "bq" in specs:
            assert results["bq"].rows == results["pg"].rows
            assert results["bq"].position == results["pg"].position
            assert live_rows(specs["bq"]) == want, f"run {run}"

    again = {r.destination: r for r in ship(lake.settings, config, spark=lake.spark)}
    assert all(again[n].rows == 0 for n in shipped)  # nothing new
    assert live_rows(specs["maria"]) == expected(landed)
    if "bq" in specs:
        assert live_rows(specs["bq"]) == expected(landed)


NULLED = parse_schema({"table": "nulled", "columns": [
    {"name": "title", "type": "string"}, {"name": "meta", "type": "json"},
]})


def test_a_nul_ships_to_postgres_as_the_replacement_character(
    lake: Lake, databases: tuple[str, str]
) -> None:
    """PostgreSQL's text and jsonb refuse U+0000: the Spark query maps it to U+FFFD (json keys
    and values too; an escaped backslash before ``u0000`` is text and stays), so the table
    ships with the other rows, the watermark moves, and the next run ships nothing."""
    gw = "gw_nul"
    pg_url, _ = databases
    spec = DestinationSpec("postgres", pg_url, gw, name="pg")
    config = Config(data_dir=lake.settings.data_dir, jwt_secrets=[],
                    gateways={gw: GatewayConfig(gw, [NULLED])}, destinations={"pg": spec})
    lake.land(gw, [
        RowDelta.create("INSERT", "nulled", "nul", "c1", {
            "title": "a\x00b", "meta": {"k\x00": ["\x00", "\\u0000", "\\\x00"]},
        }, 5000 << 16),
        RowDelta.create("INSERT", "nulled", "plain", "c1", {"title": "plain", "meta": {"k": 1}},
                        5001 << 16),
    ])
    run_pipeline(settings=lake.settings, schemas=[NULLED], tests=False, config=config)
    [shipped] = ship(lake.settings, config, spark=lake.spark)
    assert (shipped.table, shipped.rows, shipped.error) == ("nulled", 2, None)
    columns = [("title", "string"), ("meta", "json")]
    with open_destination(spec, env={}) as dest:
        rows = dest.read_rows(dest.layout("nulled", columns))
        assert dest.watermark("nulled") == shipped.position is not None
    assert {r["row_id"]: (r["title"], r["meta"]) for r in rows} == {
        "nul": ("a\ufffdb", '{"k\ufffd":["\ufffd","\\\\u0000","\\\\\ufffd"]}'),
        "plain": ("plain", '{"k":1}'),
    }
    [again] = ship(lake.settings, config, spark=lake.spark)
    assert (again.rows, again.position, again.error) == (0, shipped.position, None)


TIERED = parse_schema({"table": "tiered", "columns": [{"name": "title", "type": "string"}]})


def test_fan_out_and_lifecycle_tiering_through_materialise(
    lake: Lake, databases: tuple[str, str]
) -> None:
    """Shipping into a PostgreSQL primary whose fan-out secondary (MariaDB on a closed port)
    never answers: the primary gets every row, the run succeeds, the failures are counted; a
    ``kind: lake`` destination in the same run gets the same rows (Spark and pyiceberg on one
    catalog). Lifecycle tiering (``hot_window: 30d``) goes by each row's last change in the lake:
    a row last changed 40 days ago leaves PostgreSQL in the very run that first ships it; later
    a lifecycle run moves the rows that aged since (a row shipped long ago but changed recently
    stays); the documented combined read, ``lakesync query`` over the lake's
    ``analytics.tiered``, returns the same rows as before; hot rows plus evicted rows are exactly
    those rows; a row changed again after its eviction is shipped back into the hot tier."""
    from lakesync.destinations.metrics import DestinationMetrics
    from lakesync.lakehouse.query import run_query
    from lakesync.lakehouse.shipping import tier

    gw = "gw_tier"
    pg_url, _ = databases
    spec = DestinationSpec("postgres", pg_url, gw, hot_window="30d", secondaries=["down"],
                           name="hot")
    down = DestinationSpec("mysql", "mysql://root@127.0.0.1:1/x", gw, name="down")
    exports = DestinationSpec("lake", "lake://exports", gw, name="exports")
    config = Config(data_dir=lake.settings.data_dir, jwt_secrets=[],
                    gateways={gw: GatewayConfig(gw, [TIERED])},
                    destinations={"hot": spec, "down": down, "exports": exports})
    now = datetime.now(UTC)

    def clock(days_ago: int, counter: int) -> int:
        return encode(int((now - timedelta(days=days_ago)).timestamp() * 1000), counter)

    rows = [f"t{i}" for i in range(10)]
    aged = ["t1", "t4", "t5", "t8"]  # last changed 10 days ago: hot now, cold 20 days from now
    lake.land(gw, [
        *(RowDelta.create("INSERT", "tiered", r, "c1", {"title": r},
                          clock(10 if r in aged else 0, i)) for i, r in enumerate(rows)),
        RowDelta.create("INSERT", "tiered", "ancient", "c1", {"title": "ancient"}, clock(40, 0)),
    ])
    run_pipeline(settings=lake.settings, schemas=[TIERED], tests=False, config=config)
    metrics = DestinationMetrics()
    shipped = ship(lake.settings, config, spark=lake.spark, metrics=metrics)
    # shipping to the secondary failed (counted once for the table); the primary has the rows,
    # then loses the one whose last change is older than the window
    assert [(r.destination, r.rows, r.evicted, r.secondary_failures, r.error)
            for r in shipped] == [("hot", 11, 1, 1, None), ("exports", 11, 0, 0, None)]
    assert metrics.secondary_failures("hot", "down") == 1
    with open_destination(exports, env={}, catalog=lake_catalog(lake.settings)) as dest:
        exported = dest.read_rows(dest.layout("tiered", [("title", "string")]))
        assert [(r["row_id"], r["title"]) for r in exported] == [
            (r, r) for r in sorted([*rows, "ancient"])]
        assert shipped[1].position is not None
        assert dest.watermark("tiered") == shipped[1].position

    sql = f"select row_id, title from analytics.tiered where gateway_id = '{gw}' order by row_id"
    before = run_query(lake.settings, sql).rows
    assert [r[0] for r in before] == sorted([*rows, "ancient"])
    with psycopg.connect(pg_url, autocommit=True) as conn:  # shipped long ago, changed today
        conn.execute("update tiered set synced_at = synced_at - interval '31 days' "
                     "where row_id = 't0'")

    tiered = tier(lake.settings, config, now=now + timedelta(days=25))
    assert [(r.destination, r.table, r.evicted, r.error) for r in tiered] == [
        ("hot", "tiered", 4, None)
    ]
    with open_destination(spec, env={}) as dest:
        hot = {r["row_id"]: r["title"] for r in dest.read_rows(dest.layout("tiered", [
            ("title", "string")]))}
    assert sorted(hot) == sorted(set(rows) - set(aged))  # aged rows left PostgreSQL
    after = run_query(lake.settings, sql).rows
    assert after == before  # the combined read still sees every row
    cold = [*aged, "ancient"]
    assert sorted([*hot.items(), *((r, r) for r in cold)]) == sorted(after)

    # An evicted row written again is hot again (shipping carries its whole state).
    lake.land(gw, [RowDelta.create("UPDATE", "tiered", "t4", "c1", {"title": "back"},
                                   clock(0, 100))])
    run_pipeline(settings=lake.settings, schemas=[TIERED], tests=False, config=config)
    again = ship(lake.settings, config, spark=lake.spark, metrics=metrics)
    assert [(r.rows, r.evicted, r.error) for r in again] == [(1, 0, None), (1, 0, None)]
    assert metrics.secondary_failures("hot", "down") == 2
    with open_destination(spec, env={}) as dest:
        back = dest.read_rows(dest.layout("tiered", [("title", "string")]))
    assert {r["row_id"]: r["title"] for r in back}["t4"] == "back"


CAUGHT = parse_schema({"table": "caught", "columns": [{"name": "title", "type": "string"}]})


def test_a_secondary_that_missed_a_run_is_caught_up_by_the_next(
    lake: Lake, databases: tuple[str, str]
) -> None:
    """A fan-out secondary keeps its own watermark: while it is down (MariaDB on a closed port)
    the primary ships alone and the failure is counted; when it answers again, the next run
    ships it everything it missed, so it holds the same rows as the primary."""
    from lakesync.destinations.metrics import DestinationMetrics

    gw = "gw_caught"
    pg_url, my_url = databases
    primary = DestinationSpec("postgres", pg_url, gw, secondaries=["copy"], name="app")

    def config(copy_url: str) -> Config:
        copy = DestinationSpec("mysql", copy_url, gw, delete="hard", name="copy")
        return Config(data_dir=lake.settings.data_dir, jwt_secrets=[],
                      gateways={gw: GatewayConfig(gw, [CAUGHT])},
                      destinations={"app": primary, "copy": copy})

    def rows(spec: DestinationSpec) -> dict[str, str]:
        with open_destination(spec, env={}) as dest:
            got = dest.read_rows(dest.layout("caught", [("title", "string")]))
        return {r["row_id"]: r["title"] for r in got if r.get("deleted_at") is None}

    metrics = DestinationMetrics()
    lake.land(gw, [RowDelta.create("INSERT", "caught", f"c{i}", "c1", {"title": f"v{i}"},
                                   (4000 + i) << 16) for i in range(6)])
    unreachable = config("mysql://root@127.0.0.1:1/x")
    run_pipeline(settings=lake.settings, schemas=[CAUGHT], tests=False, config=unreachable)
    down = ship(lake.settings, unreachable, spark=lake.spark, metrics=metrics)
    assert [(r.destination, r.rows, r.secondary_failures, r.error) for r in down] == [
        ("app", 6, 1, None)
    ]
    assert metrics.secondary_failures("app", "copy") == 1

    # Meanwhile the rows change: an update, a delete and a new row.
    lake.land(gw, [
        RowDelta.create("UPDATE", "caught", "c1", "c1", {"title": "new"}, 4100 << 16),
        RowDelta.create("DELETE", "caught", "c2", "c1", {}, 4101 << 16),
        RowDelta.create("INSERT", "caught", "c9", "c1", {"title": "v9"}, 4102 << 16),
    ])
    back = config(my_url)
    run_pipeline(settings=lake.settings, schemas=[CAUGHT], tests=False, config=back)
    up = ship(lake.settings, back, spark=lake.spark, metrics=metrics)
    assert [(r.destination, r.rows, r.secondary_failures, r.error) for r in up] == [
        ("app", 3, 0, None)
    ]
    want = {"c0": "v0", "c1": "new", "c3": "v3", "c4": "v4", "c5": "v5", "c9": "v9"}
    assert rows(primary) == want
    assert rows(back.destinations["copy"]) == want  # caught up with what it missed
    assert metrics.secondary_failures("app", "copy") == 1
    with open_destination(back.destinations["copy"], env={}) as copy, \
            open_destination(primary, env={}) as app:
        assert copy.watermark("caught") == app.watermark("caught") is not None


READIED = parse_schema({"table": "readied", "columns": [{"name": "title", "type": "string"}]})
BROKEN = parse_schema({"table": "broken", "columns": [{"name": "title", "type": "string"}]})


def test_change_sets_are_dbt_models_the_pipeline_builds_and_materialise_ships_as_built(
    lake: Lake, databases: tuple[str, str]
) -> None:
    """The pipeline's dbt build builds each destination's change set from the watermark the
    destination is at; shipping reads that table as built (no rebuild); a change set built from
    another watermark is rebuilt before shipping, never shipped; one that cannot be rebuilt
    fails its table only, and the next run converges; one shipped up to the destination's
    watermark serves it as empty while the lake has not changed."""
    from lakesync.lakehouse.catalog import open_catalog

    gw = "gw_models"
    pg_url, _ = databases
    spec = DestinationSpec("postgres", pg_url, gw, name="app")
    config = Config(data_dir=lake.settings.data_dir, jwt_secrets=[],
                    gateways={gw: GatewayConfig(gw, [READIED, BROKEN])},
                    destinations={"app": spec})
    catalog = open_catalog(lake.settings)

    def change_set(table: str) -> tuple[str | None, int | None, list[tuple[Any, ...]]]:
        """The model's recorded watermark, its snapshot and its (row_id, deleted) rows."""
        ident = f"lakesync_changes.changes__app__{table}"
        built = catalog.load_table(ident)
        snap = built.current_snapshot()
        rows = lake.spark.sql(f"select row_id, _lakesync_deleted from {ident}").collect()
        return (built.properties.get("lakesync.since"), snap and snap.snapshot_id,
                sorted((r[0], r[1]) for r in rows))

    def titles(table: str) -> dict[str, str]:
        with open_destination(spec, env={}) as dest:
            got = dest.read_rows(dest.layout(table, [("title", "string")]))
        return {r["row_id"]: r["title"] for r in got if r.get("deleted_at") is None}

    def ship_all() -> dict[str, Any]:
        return {r.table: r for r in ship(lake.settings, config, spark=lake.spark)}

    def insert(table: str, row: str, title: str, at: int) -> RowDelta:
        return RowDelta.create("INSERT", table, row, "c1", {"title": title}, at << 16)

    lake.land(gw, [insert(t, f"{t[0]}{i}", f"v{i}", 5000 + i)
                   for t in ("readied", "broken") for i in range(4)])
    result = run_pipeline(settings=lake.settings, schemas=[READIED, BROKEN], tests=True,
                          config=config)
    assert result.change_sets == ["changes__app__broken", "changes__app__readied"]
    since, snap, rows = change_set("readied")
    assert since == "-1" and rows == [(f"r{i}", False) for i in range(4)]

    shipped = ship_all()
    assert (shipped["readied"].rows, shipped["readied"].error) == (4, None)
    assert change_set("readied")[1] == snap  # shipped as the pipeline built it
    assert titles("readied") == {f"r{i}": f"v{i}" for i in range(4)}
    mark = shipped["readied"].position
    assert mark is not None

    # Alone, materialise finds the change set shipped up to the destination's watermark and the
    # lake unchanged since it was built: nothing to ship, nothing rebuilt.
    assert catalog.load_table("lakesync_changes.changes__app__readied").properties[
        "lakesync.drained"] == str(mark)
    again = ship_all()["readied"]
    assert (again.rows, again.position, again.error) == (0, mark, None)
    assert change_set("readied")[:2] == ("-1", snap)

    # New changes: the next pipeline run builds them from the watermark.
    lake.land(gw, [
        RowDelta.create("UPDATE", "readied", "r1", "c1", {"title": "new"}, 5100 << 16),
        RowDelta.create("DELETE", "readied", "r2", "c1", {}, 5101 << 16),
        insert("broken", "b9", "v9", 5102),
    ])
    run_pipeline(settings=lake.settings, schemas=[READIED, BROKEN], tests=True, config=config)
    assert change_set("readied")[0::2] == (str(mark), [("r1", False), ("r2", True)])
    assert ship_all()["readied"].rows == 2
    assert titles("readied") == {"r0": "v0", "r1": "new", "r3": "v3"}

    # The lake changes while the destination cannot be reached: the pipeline keeps its change
    # sets as they were; the next materialise sees the lake moved on and rebuilds them.
    lake.land(gw, [insert("readied", "r5", "v5", 5150)])
    unreachable = DestinationSpec("postgres", "postgresql://127.0.0.1:1/x", gw, name="app")
    result = run_pipeline(
        settings=lake.settings, schemas=[READIED, BROKEN], tests=False,
        config=msgspec.structs.replace(config, destinations={"app": unreachable}),
    )
    assert result.change_sets == []
    kept = change_set("readied")
    assert kept[0] == str(mark) and kept[2] == [("r1", False), ("r2", True)]
    caught_up = ship_all()["readied"]
    assert (caught_up.rows, caught_up.error) == (1, None)
    assert titles("readied") == {"r0": "v0", "r1": "new", "r3": "v3", "r5": "v5"}

    # A change set that cannot be rebuilt (its current-state table is gone) fails its table
    # and ships nothing stale; the other table ships; the next run converges.
    lake.land(gw, [insert("readied", "r7", "v7", 5200), insert("broken", "b8", "v8", 5201)])
    run_pipeline(settings=lake.settings, schemas=[READIED, BROKEN], tests=False)  # no config
    catalog.drop_table("analytics.broken")
    before = titles("broken")
    failed = ship_all()
    assert failed["readied"].error is None and failed["readied"].rows == 1
    assert failed["broken"].error is not None
    assert "changes__app__broken is not built from watermark" in failed["broken"].error
    assert titles("broken") == before
    run_pipeline(settings=lake.settings, schemas=[READIED, BROKEN], tests=False, config=config)
    assert ship_all()["broken"].error is None
    assert titles("broken") == {**{f"b{i}": f"v{i}" for i in range(4)}, "b8": "v8", "b9": "v9"}

    # A table no declared destination receives any more loses its change set (table and files).
    narrowed = DestinationSpec("postgres", pg_url, gw, ["readied"], name="app")
    run_pipeline(settings=lake.settings, schemas=[READIED, BROKEN], tests=False,
                 config=msgspec.structs.replace(config, destinations={"app": narrowed}))
    assert catalog.table_exists("lakesync_changes.changes__app__readied")
    assert not catalog.table_exists("lakesync_changes.changes__app__broken")
