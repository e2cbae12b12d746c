"""Shipping end to end through the interface (:meth:`Destination.ship`, :meth:`Destination.tier`)
on every destination kind, and the composites shipping is made of: routing, fan-out and hot/cold
tiering. The lake's side is a stand-in here (no Spark): a change set with nothing past the
watermark, or one the lake cannot serve; ``test_change_set_shipping.py`` ships real rows."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import msgspec
import pytest

from lakesync.destination_specs import DestinationSpec
from lakesync.destinations.base import (
    Destination,
    DestinationError,
    TieringMark,
    cutoff_hlc,
    typed_change,
)
from lakesync.destinations.metrics import DestinationMetrics
from lakesync.destinations.routing import (
    CompositeDestination,
    TieredDestination,
    UnreachableDestination,
    open_declared,
)
from lakesync.schema import ColumnSpec
from tests.destinations.conftest import _drop, open_fresh
from tests.destinations.test_adapters import COLUMNS, live

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


@dataclass
class StandIn:
    """A :class:`~lakesync.destinations.base.ChangeSet` with ``frame`` past any watermark
    (None: nothing; with ``refuse``, one the lake cannot serve); it records what it was asked
    and what ``shipped`` was told."""

    table: str = "todos"
    columns: Sequence[ColumnSpec] = tuple(ColumnSpec(n, t) for n, t in COLUMNS)  # type: ignore[arg-type]
    external_id: str | None = None
    refuse: str | None = None
    frame: DataFrame | None = None
    asked: list[tuple[str, int | None]] = field(default_factory=list)
    told: list[tuple[str, int | None]] = field(default_factory=list)

    def rows(self, destination: DestinationSpec, since: int | None) -> DataFrame | None:
        self.asked.append((destination.name, since))
        if self.refuse is not None:
            raise DestinationError(self.refuse)
        return self.frame

    def shipped(self, destination: DestinationSpec, position: int | None) -> None:
        self.told.append((destination.name, position))


@dataclass
class Cold:
    """A cold tier that names the rows it was given as aged (and remembers each question)."""

    aged: list[str]
    now: datetime = NOW
    questions: list[tuple[str, str, datetime, TieringMark | None]] = field(default_factory=list)

    def aged_rows(
        self, gateway_id: str, table: str, before: datetime, mark: TieringMark | None
    ) -> list[str]:
        self.questions.append((gateway_id, table, before, mark))
        return list(self.aged)


def with_window(dest: Destination, window: str = "1d") -> Destination:
    dest.spec = msgspec.structs.replace(dest.spec, hot_window=window)
    return dest


@pytest.fixture
def sqlite_pair() -> Iterator[tuple[Destination, Destination]]:
    one, one_name = open_fresh("sqlite")
    two, two_name = open_fresh("sqlite")
    try:
        yield one, two
    finally:
        one.close()
        two.close()
        _drop("sqlite", one_name)
        _drop("sqlite", two_name)


def test_ship_creates_the_table_and_keeps_the_watermark_with_nothing_past_it(
    destination: Destination,
) -> None:
    first = destination.ship(change_set := StandIn())
    assert (first.destination, first.table, first.rows, first.error) == (
        destination.spec.name, "todos", 0, None)
    assert first.position is None and set(first.steps) == {"prepare", "ship"}
    layout = destination.layout("todos", COLUMNS)
    destination.apply_changes(layout, [typed_change(layout, "a", {"title": "x"})], position=5)
    again = destination.ship(change_set)
    assert (again.rows, again.position, again.error) == (0, 5, None)
    assert change_set.asked == [(destination.spec.name, None), (destination.spec.name, 5)]
    assert change_set.told == []  # nothing was taken from the lake: nothing to record
    assert live(destination) == {"a": {"title": "x", "done": None, "score": None, "meta": None}}


def test_a_change_set_the_lake_cannot_serve_fails_only_its_result(
    destination: Destination,
) -> None:
    result = destination.ship(StandIn(refuse="not built from watermark -1"))
    assert result.error == "not built from watermark -1" and result.rows == 0
    assert destination.watermark("todos") is None


def test_tiering_evicts_the_aged_rows_after_shipping_and_records_the_mark(
    destination: Destination,
) -> None:
    if destination.lives_in_lake:
        pytest.skip("the lake is the cold tier itself: it has no hot window")
    cold = Cold(["old", "never-shipped"])
    tiered = TieredDestination(with_window(destination), cold)
    layout = tiered.layout("todos", COLUMNS)
    tiered.ensure_table(layout)
    tiered.apply_changes(layout, [typed_change(layout, "old", {"title": "x"}),
                                  typed_change(layout, "new", {"title": "y"})], position=7)
    result = tiered.ship(StandIn())
    assert (result.position, result.evicted, result.error) == (7, 1, None)
    assert list(live(destination)) == ["new"]
    before = NOW - timedelta(days=1)
    assert cold.questions == [(destination.spec.gateway, "todos", before, None)]
    assert destination.tiering_mark("todos") == TieringMark(cutoff_hlc(before), 7)
    again = tiered.tier("todos", COLUMNS, None)  # tiering alone asks with the mark it left
    assert again is not None and again.evicted == 0
    assert cold.questions[-1][3] == TieringMark(cutoff_hlc(before), 7)


def test_tiering_never_evicts_before_anything_was_shipped(
    sqlite_pair: tuple[Destination, ...],
) -> None:
    cold = Cold(["a"])
    tiered = TieredDestination(with_window(sqlite_pair[0]), cold)
    result = tiered.tier("todos", COLUMNS, None)
    assert result is not None and (result.evicted, result.error) == (0, None)
    assert cold.questions == []
    assert sqlite_pair[1].tier("todos", COLUMNS, None) is None  # no hot window: nothing to do


def test_a_cold_tier_that_cannot_tell_fails_the_tiering_not_the_shipment(
    sqlite_pair: tuple[Destination, ...],
) -> None:
    class Unreadable(Cold):
        def aged_rows(self, *args: object) -> list[str]:
            raise DestinationError("cannot read the lake's row clocks")

    hot = with_window(sqlite_pair[0])
    layout = hot.layout("todos", COLUMNS)
    hot.ensure_table(layout)
    hot.apply_changes(layout, [typed_change(layout, "a", {"title": "x"})], position=2)
    result = TieredDestination(hot, Unreadable([])).ship(StandIn())
    assert result.position == 2
    assert result.error == "lifecycle tiering: cannot read the lake's row clocks"


def test_fan_out_ships_each_secondary_from_its_own_watermark(
    sqlite_pair: tuple[Destination, Destination],
) -> None:
    primary, copy = sqlite_pair
    specs = {
        "app": msgspec.structs.replace(primary.spec, name="app",
                                       secondaries=["copy", "gone"]),
        "copy": msgspec.structs.replace(copy.spec, name="copy"),
        "gone": DestinationSpec("mysql", "mysql://root@127.0.0.1:1/x", "gw1", name="gone"),
    }
    opened = {"app": primary, "copy": copy}

    def open_one(spec: DestinationSpec) -> Destination:
        if spec.name not in opened:
            raise DestinationError(f"cannot connect to {spec.name}")
        opened[spec.name].spec = spec
        return opened[spec.name]

    layout = copy.layout("todos", COLUMNS)
    copy.ensure_table(layout)
    copy.apply_changes(layout, [], position=3)
    metrics = DestinationMetrics()
    fan = open_declared(specs["app"], specs, open_one, metrics)
    result = fan.ship(change_set := StandIn())
    assert (result.destination, result.error, result.secondary_failures) == ("app", None, 1)
    assert change_set.asked == [("app", None), ("copy", 3)]
    assert metrics.secondary_failures("app", "gone") == 1


def test_a_composite_ships_each_table_to_its_route_under_its_own_name(
    sqlite_pair: tuple[Destination, Destination],
) -> None:
    own, events = sqlite_pair
    both = CompositeDestination({"events": events}, default=own)
    result = both.ship(change_set := StandIn(table="events"))
    assert (result.destination, result.error) == (own.spec.name, None)
    assert change_set.asked == [(events.spec.name, None)]
    assert events.watermark("events") is None and events.read_rows(
        events.layout("events", COLUMNS)) == []
    gone = UnreachableDestination(own.spec, DestinationError("cannot connect"))
    failed = CompositeDestination({"events": gone}, default=own).ship(StandIn(table="events"))
    assert failed.error == "cannot connect"
