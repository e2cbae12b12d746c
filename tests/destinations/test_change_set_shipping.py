"""Shipping goes through the interface: every destination kind (the SQLite one of the tests
included) ships a change set computed on Spark with ``Destination.ship``, the one call the
lakehouse makes, which applies it (``Destination.apply_change_set``) and advances the watermark
to the set's greatest position."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakesync.destinations.base import Destination, typed_change
from lakesync.schema import ColumnSpec
from tests.destinations.test_adapters import COLUMNS, live
from tests.destinations.test_shipping import StandIn
from tests.lakehouse.conftest import make_lake

STAGED = ("row_id string, title string, done boolean, score double, meta string, "
          "_deleted boolean, _position bigint")

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    lake = make_lake(Path(tmp_path_factory.mktemp("lake")))
    yield lake.spark
    lake.spark.stop()
    lake.log.close()


@pytest.mark.parametrize("delete_mode", ["hard"])
def test_a_change_set_from_spark_ships_through_the_interface(
    destination: Destination, spark: SparkSession
) -> None:
    layout = destination.layout("todos", COLUMNS)
    destination.ensure_table(layout)
    destination.apply_changes(layout, [typed_change(layout, "b", {"title": "leaving"})], 3)
    rows = [("a", "Buy milk", False, 1.5, '{"k":[1,2]}', False, 7),
            ("b", None, None, None, None, True, 9),
            ("c", "ünïcødé ✓", True, None, None, False, 8)]
    assert destination.apply_change_set(layout, spark.createDataFrame(rows, STAGED)) == (3, 9)
    assert live(destination) == {
        "a": {"title": "Buy milk", "done": False, "score": 1.5, "meta": '{"k":[1,2]}'},
        "c": {"title": "ünïcødé ✓", "done": True, "score": None, "meta": None},
    }
    assert destination.watermark("todos") == 9
    empty = spark.createDataFrame([], STAGED)
    assert destination.apply_change_set(layout, empty) == (0, None)
    assert destination.watermark("todos") == 9


@pytest.mark.parametrize("delete_mode", ["soft"])
def test_ship_takes_the_rows_past_the_watermark_and_tells_the_lake(
    destination: Destination, spark: SparkSession
) -> None:
    frame = spark.createDataFrame([("a", "Buy milk", False, 1.5, None, False, 4),
                                   ("b", None, None, None, None, True, 6)], STAGED)
    change_set = StandIn(columns=[ColumnSpec(n, t) for n, t in COLUMNS],  # type: ignore[arg-type]
                         frame=frame)
    result = destination.ship(change_set)
    assert (result.rows, result.position, result.error) == (2, 6, None)
    assert change_set.told == [(destination.spec.name, 6)]
    assert live(destination) == {
        "a": {"title": "Buy milk", "done": False, "score": 1.5, "meta": None}}
    assert destination.watermark("todos") == 6


TYPED_STAGED = ("row_id string, id bigint, amount decimal(38,9), at timestamp, day date, "
                "blob binary, _deleted boolean, _position bigint")


@pytest.mark.parametrize("kind", ["lake", "sqlite"])
@pytest.mark.parametrize("delete_mode", ["hard"])
def test_a_typed_change_set_from_spark_lands_exactly(
    destination: Destination, spark: SparkSession
) -> None:
    """The interface's default shipping (the change set brought to the driver) keeps typed
    values: PySpark's naive local timestamps are read as the instants they are."""
    layout = destination.layout("typed", [
        ColumnSpec("id", "integer"), ColumnSpec("amount", "decimal", 38, 9),
        ColumnSpec("at", "timestamp"), ColumnSpec("day", "date"), ColumnSpec("blob", "bytes")])
    destination.ensure_table(layout)
    at = datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    amount = Decimal("12345678901234567890123456789.123456789")
    rows = [("a", 2**62 + 1, amount, at, date(1900, 1, 1), bytearray(b"\x00a\x00"), False, 5)]
    assert destination.apply_change_set(layout, spark.createDataFrame(rows, TYPED_STAGED)) == (
        1, 5)
    (row,) = destination.read_rows(layout)
    assert (row["id"], row["amount"], row["at"], row["day"], row["blob"]) == (
        2**62 + 1, amount, at, date(1900, 1, 1), b"\x00a\x00")


@pytest.mark.parametrize("kind", ["lake", "sqlite"])
@pytest.mark.parametrize("delete_mode", ["hard"])
def test_timestamps_at_both_ends_of_the_range_ship(
    destination: Destination, spark: SparkSession
) -> None:
    """A timestamp on 0001-01-01 (UTC) ships: PySpark's own conversion of it to a datetime
    fails (``datetime.fromtimestamp`` probes a day earlier), which failed the table's shipping."""
    layout = destination.layout("ends", [ColumnSpec("at", "timestamp")])
    destination.ensure_table(layout)
    first = datetime(1, 1, 1, tzinfo=UTC)
    last = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    rows = [("a", first, False, 1), ("b", last, False, 2), ("c", None, False, 3)]
    frame = spark.createDataFrame(rows, "row_id string, at timestamp, _deleted boolean, "
                                        "_position bigint")
    assert destination.apply_change_set(layout, frame) == (3, 3)
    assert {r["row_id"]: r["at"] for r in destination.read_rows(layout)} == {
        "a": first, "b": last, "c": None}
