"""The pure cell decoders (lakesync/cells.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from lakesync import cells
from lakesync.cells import (
    hlc_to_timestamp,
    json_to_boolean,
    json_to_double,
    json_to_json_text,
    json_to_string,
)
from lakesync.hlc import encode
from lakesync.spark_udfs import decode


def test_each_decoder_takes_only_its_json_type() -> None:
    assert json_to_string('"é x"') == "é x"
    assert json_to_string("null") is None
    assert json_to_string("1") == "1"  # a column widened to string reads any value as its text
    assert json_to_double("1") == 1.0 and json_to_double("1e+21") == 1e21
    assert json_to_double("true") is None and json_to_double('"x"') is None
    assert json_to_double('"1.5"') == 1.5  # a decimal widened to number
    assert json_to_boolean("false") is False and json_to_boolean("0") is None
    assert json_to_json_text('{"b": 1, "a": [1.0, null]}') == '{"a":[1,null],"b":1}'
    assert json_to_json_text("null") is None
    assert json_to_string(None) is None


def test_hlc_to_timestamp_uses_the_wall_clock_bits() -> None:
    hlc = encode(1_700_000_000_123, 42)
    expected = datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
    assert hlc_to_timestamp(hlc) == expected
    assert hlc_to_timestamp(Decimal(hlc)) == expected
    assert hlc_to_timestamp(None) is None
    assert hlc_to_timestamp(2**64 - 1) is None  # wall time in the year 10889: no timestamp
    assert hlc_to_timestamp(encode(253_402_300_799_999, 0)).year == 9999


def test_the_old_import_path_still_gives_the_decoders() -> None:
    """The decoders lived in ``lakesync.spark_udfs.decode`` before they moved to the core."""
    assert all(getattr(decode, name) is getattr(cells, name) for name in decode.__all__)
