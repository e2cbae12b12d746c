"""Shipping goes through the interface: every destination kind (the SQLite one of the tests
included) applies a change set computed on Spark with ``Destination.apply_change_set``, the one
call the lakehouse makes, and advances its watermark to the set's greatest position."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakesync.destinations.base import Destination, typed_change
from tests.destinations.test_adapters import COLUMNS, live
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
