"""``lakesync schema migrate``: a number column registered before typed columns existed becomes
an integer or a decimal once every value it holds fits; otherwise nothing changes and the error
names the rows. The destinations then change the column's type keeping every value
(``tests/destinations/test_adapters.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lakesync.cli.schema import migrate_column
from lakesync.config import load_config
from lakesync.delta import RowDelta
from lakesync.errors import SchemaError
from lakesync.hlc import HLC
from lakesync.hotlog.factory import open_store
from lakesync.hotlog.sharded import open_hot_log
from lakesync.schema import ColumnSpec, parse_schema, schema_to_wire
from tests.cli.test_main import run_cli

ORDERS = parse_schema({"table": "orders", "columns": [
    {"name": "qty", "type": "number"}, {"name": "note", "type": "string"}]})


def _store_with(data_dir: Path, values: list[object]) -> None:
    store = open_store("sqlite", data_dir, HLC())
    try:
        store.put_doc("gw1", "schema", "orders", schema_to_wire(ORDERS))
        for i, value in enumerate(values):
            store.append("gw1", [RowDelta.create("INSERT", "orders", f"o{i}", "c1",
                                                 {"qty": value, "note": "x"}, 100 + i)])
    finally:
        store.close()


def _stored(data_dir: Path) -> dict[str, ColumnSpec]:
    store = open_store("sqlite", data_dir, HLC())
    try:
        schema = parse_schema(store.list_docs("gw1", "schema")["orders"], stored=True)
    finally:
        store.close()
    return {c.name: c for c in schema.columns}


def test_the_command_retypes_a_number_column_whose_values_fit(tmp_path: Path) -> None:
    _store_with(tmp_path, [3, -7, None, 2**53])
    proc = run_cli("schema", "migrate", "orders", "qty", "--type", "decimal", "--precision",
                   "20", "--scale", "2", "--gw", "gw1", "--data-dir", str(tmp_path), secret=None)
    assert proc.returncode == 0, proc.stderr
    assert "gw1.orders.qty is now decimal(20,2)" in proc.stdout
    assert _stored(tmp_path)["qty"] == ColumnSpec("qty", "decimal", 20, 2)


def test_values_that_do_not_fit_are_named_and_nothing_changes(tmp_path: Path) -> None:
    _store_with(tmp_path, [3, 1.5, 2**60])
    proc = run_cli("schema", "migrate", "orders", "qty", "--type", "integer", "--gw", "gw1",
                   "--data-dir", str(tmp_path), secret=None)
    assert proc.returncode == 1
    assert "row 'o1': 1.5 is not an integer" in proc.stderr
    assert "row 'o2'" in proc.stderr  # 2^60 arrived as a double: no exact integer
    assert _stored(tmp_path)["qty"] == ColumnSpec("qty", "number")


def test_only_number_columns_migrate_and_only_to_integer_or_decimal(tmp_path: Path) -> None:
    _store_with(tmp_path, [1])
    store = open_store("sqlite", tmp_path, HLC())
    try:
        with pytest.raises(SchemaError, match="only a number column"):
            migrate_column(store, "gw1", "orders", ColumnSpec("note", "integer"))
        with pytest.raises(SchemaError, match="migrates to integer or decimal"):
            migrate_column(store, "gw1", "orders", ColumnSpec("qty", "timestamp"))
        migrated = migrate_column(store, "gw1", "orders", ColumnSpec("qty", "integer"))
    finally:
        store.close()
    assert migrated.columns[0] == ColumnSpec("qty", "integer")


def test_values_of_a_table_held_by_a_shard_are_checked_too(tmp_path: Path) -> None:
    """With ``shards:``, the command reads the table where it is stored, not the default store
    (which holds none of its rows: every value would pass unchecked)."""
    config = tmp_path / "lakesync.yaml"
    config.write_text(yaml.safe_dump({
        "data_dir": str(tmp_path),
        "shards": [{"name": "sales", "store_url": "sqlite", "tables": ["orders"]}],
    }), encoding="utf-8")
    store = open_hot_log("sqlite", load_config(config).shards, tmp_path, HLC())
    try:
        store.put_doc("gw1", "schema", "orders", schema_to_wire(ORDERS))
        store.append("gw1", [RowDelta.create("INSERT", "orders", "o1", "c1",
                                             {"qty": 1.5, "note": "x"}, 100)])
    finally:
        store.close()
    proc = run_cli("schema", "migrate", "orders", "qty", "--type", "integer", "--gw", "gw1",
                   "--config", str(config), secret=None)
    assert proc.returncode == 1, proc.stdout
    assert "row 'o1': 1.5 is not an integer" in proc.stderr
