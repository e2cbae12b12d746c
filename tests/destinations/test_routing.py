"""Composite (tables routed to destinations) and fan-out (a failing secondary never blocks the
primary; its failures are counted), on the real PostgreSQL and MariaDB."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from lakesync.config import load_config
from lakesync.destination_specs import DestinationSpec
from lakesync.destinations.base import Destination, DestinationError, typed_change
from lakesync.destinations.factory import mysql_params, open_destination
from lakesync.destinations.metrics import DestinationMetrics
from lakesync.destinations.routing import CompositeDestination, FanOutDestination, open_declared
from tests.conftest import require_postgres
from tests.destinations.conftest import (
    MYSQL_DSN,
    _drop,
    _fresh_mysql,
    _fresh_postgres,
    open_fresh,
    require_mysql,
)

COLUMNS = [("title", "string")]


@pytest.fixture
def pg_and_maria() -> Iterator[tuple[Destination, Destination, str]]:
    pg, pg_name = open_fresh("postgres")
    maria, maria_name = open_fresh("mysql")
    try:
        yield pg, maria, maria_name
    finally:
        pg.close()
        maria.close()
        _drop("postgres", pg_name)
        _drop("mysql", maria_name)


def titles(dest: Destination, table: str) -> dict[str, object]:
    return {r["row_id"]: r["title"] for r in dest.read_rows(dest.layout(table, COLUMNS))}


def test_composite_routes_tables(pg_and_maria: tuple[Destination, Destination, str]) -> None:
    pg, maria, _ = pg_and_maria
    both = CompositeDestination({"events": maria}, default=pg)
    for table in ("todos", "events"):
        layout = both.layout(table, COLUMNS)
        both.ensure_table(layout)
        both.apply_changes(layout, [typed_change(layout, "a", {"title": table})], position=3)
    assert titles(pg, "todos") == {"a": "todos"}
    assert titles(maria, "events") == {"a": "events"}
    assert both.watermark("events") == 3 and maria.watermark("todos") is None
    with pytest.raises(DestinationError, match="no route for table 'x'"):
        CompositeDestination({"events": maria}).layout("x", COLUMNS)


def test_fan_out_with_a_failing_secondary(
    pg_and_maria: tuple[Destination, Destination, str]
) -> None:
    pg, maria, maria_name = pg_and_maria
    fan = FanOutDestination(pg, {"copy": maria})
    layout = fan.layout("todos", COLUMNS)
    fan.ensure_table(layout)
    fan.apply_changes(layout, [typed_change(layout, "a", {"title": "one"})], position=1)
    assert titles(pg, "todos") == titles(maria, "todos") == {"a": "one"}
    assert fan.failures["copy"] == 0

    conn = pymysql.connect(**mysql_params(MYSQL_DSN))  # type: ignore[arg-type]
    with conn.cursor() as cur:  # the secondary's table goes away under it
        cur.execute(f"drop table `{maria_name}`.`todos`")
    conn.close()
    fan.apply_changes(layout, [typed_change(layout, "b", {"title": "two"})], position=2)
    assert titles(pg, "todos") == {"a": "one", "b": "two"}  # the primary is never blocked
    assert fan.watermark("todos") == 2
    assert fan.failures["copy"] == 1



@pytest.fixture
def pg_and_maria_urls() -> Iterator[tuple[str, str]]:
    """URLs of a fresh PostgreSQL schema and a fresh MariaDB database."""
    require_postgres()
    require_mysql()
    pg_url, pg_name = _fresh_postgres()
    maria_url, maria_name = _fresh_mysql()
    try:
        yield pg_url, maria_url
    finally:
        _drop("postgres", pg_name)
        _drop("mysql", maria_name)


def test_composite_and_fan_out_declared_in_yaml(
    tmp_path: Path, pg_and_maria_urls: tuple[str, str]
) -> None:
    """``routes`` and ``secondaries`` in lakesync.yaml: the routed table lands in its route, the
    primary gets every row although its secondary (MariaDB on a closed port) never answers, and
    the Prometheus counter counts each failed write."""
    pg_url, maria_url = pg_and_maria_urls
    config_file = tmp_path / "lakesync.yaml"
    config_file.write_text(
        f"""\
destinations:
  app:
    kind: postgres
    url: "{pg_url}"
    gateway: gw1
    tables: [todos]
    routes: {{events: reporting}}
    secondaries: [broken]
  reporting: {{kind: mysql, url: "{maria_url}", gateway: gw1}}
  broken: {{kind: mysql, url: "mysql://root@127.0.0.1:1/nowhere", gateway: gw1}}
""",
        encoding="utf-8",
    )
    specs = load_config(config_file, env={}).destinations
    metrics = DestinationMetrics()

    def open_one(spec: DestinationSpec) -> Destination:
        return open_destination(spec, env={})

    with open_declared(specs["app"], specs, open_one, metrics) as dest:
        for position, table in enumerate(["todos", "events"], start=1):
            layout = dest.layout(table, COLUMNS)
            dest.ensure_table(layout)
            dest.apply_changes(layout, [typed_change(layout, "a", {"title": table})], position)
        assert dest.watermark("todos") == 1 and dest.watermark("events") == 2
    with open_one(specs["app"]) as pg, open_one(specs["reporting"]) as maria:
        assert titles(pg, "todos") == {"a": "todos"}  # the primary got its rows
        assert titles(maria, "events") == {"a": "events"}  # the routed table went to MariaDB
        assert pg.watermark("events") is None
    # ensure_table and apply_changes of each of the two tables failed on the secondary
    assert metrics.secondary_failures("app", "broken") == 4
    assert (
        b'lakesync_destination_secondary_failures_total{destination="app",secondary="broken"} 4.0'
        in metrics.render()
    )


def test_an_unreachable_route_fails_only_its_tables(pg_and_maria_urls: tuple[str, str]) -> None:
    pg_url, _ = pg_and_maria_urls
    specs = {
        "app": DestinationSpec("postgres", pg_url, "gw1", routes={"events": "gone"}, name="app"),
        "gone": DestinationSpec("mysql", "mysql://root@127.0.0.1:1/x", "gw1", name="gone"),
    }

    def open_one(spec: DestinationSpec) -> Destination:
        return open_destination(spec, env={})

    with open_declared(specs["app"], specs, open_one) as dest:
        layout = dest.layout("todos", COLUMNS)
        dest.ensure_table(layout)
        dest.apply_changes(layout, [typed_change(layout, "a", {"title": "ok"})])
        assert titles(dest, "todos") == {"a": "ok"}
        with pytest.raises(DestinationError, match="cannot connect to mysql://root@127"):
            dest.ensure_table(dest.layout("events", COLUMNS))
    with pytest.raises(DestinationError, match="cannot connect"):
        open_declared(specs["gone"], specs, open_one)  # the destination itself: an error


@pytest.mark.parametrize("namespace", ["lakesync", "analytics", "lakesync_changes"])
def test_a_lake_destination_cannot_ship_into_the_pipelines_namespaces(namespace: str) -> None:
    from lakesync.destination_specs import DestinationSpec
    from lakesync.destinations.lake import lake_namespace
    from lakesync.errors import ConfigError

    spec = DestinationSpec("lake", f"lake://{namespace}", "gw1", name="export")
    with pytest.raises(ConfigError, match="belongs to the pipeline"):
        lake_namespace(spec, spec.url)
    assert lake_namespace(spec, "lake://exports") == "exports"
