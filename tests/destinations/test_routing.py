"""Composite (tables routed to destinations) and fan-out (a failing secondary never blocks the
primary; its failures are counted), on the real PostgreSQL and MariaDB."""

from __future__ import annotations

from collections.abc import Iterator

import pymysql
import pytest

from destinations.base import Destination, DestinationError, typed_change
from destinations.factory import mysql_params
from destinations.routing import CompositeDestination, FanOutDestination
from tests.destinations.conftest import MYSQL_DSN, _drop, open_fresh

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
