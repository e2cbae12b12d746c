"""Schema contracts: what a connector does with a column the gateway's table lacks and a value
its column's type does not hold (evolve, freeze, discard_row, discard_value), pure and against a
real PostgreSQL source, with the refusals counted in the status and the metrics."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from lakesync.api.services.connectors import ConnectorMetrics, GatewaySink
from lakesync.connector_specs import TableContract, connector_client_id, parse_connector
from lakesync.connectors import Poller, open_source
from lakesync.connectors._contract import ContractError, encode_rows, merge_source_schema
from lakesync.connectors.database import PostgresDialect
from lakesync.schema import TableSchema, parse_schema
from tests.conftest import PG_DSN, require_postgres
from tests.connectors.conftest import GatewayUnderTest

DECLARED = parse_schema(
    {"table": "t", "columns": [{"name": "id", "type": "integer"}, {"name": "n", "type": "integer"}]}
)
SOURCE = parse_schema(
    {
        "table": "t",
        "columns": [
            {"name": "id", "type": "integer"},
            {"name": "n", "type": "string"},
            {"name": "extra", "type": "string"},
        ],
    }
)
ROWS = {"1": {"id": 1, "n": "7", "extra": "x"}, "2": {"id": 2, "n": "seven", "extra": None}}


def test_a_declared_type_wins_and_unknown_columns_follow_the_contract() -> None:
    merged, notes = merge_source_schema(DECLARED, SOURCE, TableContract("discard_value"))
    assert merged.column_types() == {"id": "integer", "n": "integer"}
    assert any("'extra'" in n for n in notes) and any("'n'" in n for n in notes)
    merged, _ = merge_source_schema(DECLARED, SOURCE, TableContract("evolve"))
    assert merged.column_types() == {"id": "integer", "n": "integer", "extra": "string"}
    assert merge_source_schema(None, SOURCE, TableContract("freeze"))[0] == SOURCE


def test_a_source_widening_evolves_the_column_under_data_type_evolve() -> None:
    wider = parse_schema(
        {
            "table": "t",
            "columns": [
                {"name": "id", "type": "integer"},
                {"name": "n", "type": "decimal", "precision": 30, "scale": 2},
            ],
        }
    )
    merged, _ = merge_source_schema(DECLARED, wider, TableContract("evolve", "evolve"))
    assert merged.column_types()["n"] == "decimal"
    merged, notes = merge_source_schema(DECLARED, wider, TableContract("evolve", "freeze"))
    assert merged.column_types()["n"] == "integer" and notes


def test_an_integer_altered_to_a_narrow_numeric_evolves_into_a_decimal_holding_both() -> None:
    altered = parse_schema({"table": "t", "columns": [
        {"name": "id", "type": "integer"},
        {"name": "n", "type": "decimal", "precision": 20, "scale": 2},
    ]})
    merged, notes = merge_source_schema(DECLARED, altered, TableContract("evolve", "evolve"))
    assert merged.column_specs()["n"].type == "decimal" and notes == []
    assert (merged.column_specs()["n"].precision, merged.column_specs()["n"].scale) == (21, 2)
    # Polled again, the source's narrower decimal changes nothing more.
    assert merge_source_schema(merged, altered, TableContract("evolve", "evolve")) == (merged, [])
    _, notes = merge_source_schema(DECLARED, altered, TableContract("evolve", "freeze"))
    assert any("data_type: evolve" in n for n in notes)


def test_each_mode_of_data_type() -> None:
    rows = {"1": {"id": 1, "n": 7}, "2": {"id": 2, "n": "seven"}}
    with pytest.raises(ContractError, match=r"row '2'.*'n'"):
        encode_rows(DECLARED, rows, TableContract("evolve", "freeze"))
    out = encode_rows(DECLARED, rows, TableContract("evolve", "discard_row"))
    assert out.rows == {"1": {"id": 1, "n": 7}}
    assert [(r.row_id, r.column, r.row_refused) for r in out.refusals] == [("2", "n", True)]
    out = encode_rows(DECLARED, rows, TableContract("evolve", "discard_value"))
    assert out.rows == {"1": {"id": 1, "n": 7}, "2": {"id": 2, "n": None}}
    assert [r.row_refused for r in out.refusals] == [False]
    out = encode_rows(DECLARED, rows, TableContract("evolve", "evolve"))
    assert out.widen == ["n"]


def test_each_mode_of_columns() -> None:
    with pytest.raises(ContractError, match="'extra'"):
        encode_rows(DECLARED, {"1": {"id": 1, "extra": "x"}}, TableContract("freeze"))
    out = encode_rows(
        DECLARED,
        ROWS | {"1": {"id": 1, "extra": "x"}},
        TableContract("discard_row", "discard_value"),
    )
    assert list(out.rows) == ["2"]  # row 2's extra is null: nothing lost
    out = encode_rows(DECLARED, {"1": {"id": 1, "extra": "x"}}, TableContract("discard_value"))
    assert out.rows == {"1": {"id": 1}} and out.refusals[0].row_refused is False


# -- a real PostgreSQL source -------------------------------------------------------------------


@pytest.fixture
def source_table() -> Iterator[tuple[Any, str]]:
    require_postgres()
    conn = PostgresDialect().connect(PG_DSN)
    conn.autocommit = True
    table = f"ls_contract_{uuid.uuid4().hex[:10]}"
    conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, n text, extra text)")
    conn.execute(f"INSERT INTO {table} VALUES (1, '7', 'x'), (2, 'seven', NULL), (3, '9', NULL)")
    yield conn, table
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.close()


def _run(
    gateway: GatewayUnderTest, table: str, contract: Any, declared: TableSchema | None = DECLARED
) -> Poller:
    """Declare ``t`` (default: id integer, n integer; None: the source's types register),
    then poll the source under ``contract``."""
    if declared is not None:
        asyncio.run(gateway.service.put_schema("gw1", declared))
    spec = parse_connector(
        "pg1",
        {
            "kind": "postgres",
            "gateway": "gw1",
            "dsn": PG_DSN,
            "source_table": table,
            "table": "t",
            "key": ["id"],
            "strategy": "diff",
            "contract": contract,
        },
    )
    poller = Poller(
        "pg1",
        open_source(spec),
        GatewaySink(gateway.service, gateway.store, "gw1", "pg1"),
        connector_client_id("pg1"),
        1.0,
        contract=spec.contract,
    )

    async def poll() -> None:
        try:
            await poller.poll_once()
        finally:
            await poller.source.aclose()

    with contextlib.suppress(ContractError):
        asyncio.run(poll())
    return poller


def _metric(poller: Poller, name: str) -> float:
    class Connectors:
        def __init__(self) -> None:
            self.pollers = {("gw1", "pg1"): poller}

    connectors: Any = Connectors()
    for family in ConnectorMetrics(connectors, by_gateway=True).collect():
        if family.name == name:
            return float(family.samples[0].value)
    raise AssertionError(name)


def test_discard_row_refuses_counts_and_keeps_the_rest(
    gateway: GatewayUnderTest, source_table: tuple[Any, str], caplog: pytest.LogCaptureFixture
) -> None:
    _, table = source_table
    poller = _run(gateway, table, {"columns": "discard_value", "data_type": "discard_row"})
    rows = gateway.rows("t")
    assert rows == {"1": {"id": 1, "n": 7}, "3": {"id": 3, "n": 9}}
    assert poller.status.rows_refused == 1 and poller.status.values_discarded == 1
    assert "'2'" in (poller.status.last_refusal or "") or "'extra'" in (
        poller.status.last_refusal or ""
    )
    assert _metric(poller, "lakesync_connector_rows_refused") == 1
    assert _metric(poller, "lakesync_connector_values_discarded") == 1
    assert any("row refused" in r.getMessage() and "'n'" in r.getMessage() for r in caplog.records)
    assert asyncio.run(gateway.service.schemas("gw1"))["t"] == DECLARED


def test_discard_value_stores_null(
    gateway: GatewayUnderTest, source_table: tuple[Any, str]
) -> None:
    _, table = source_table
    poller = _run(gateway, table, "discard_value")
    assert gateway.rows("t")["2"] == {"id": 2, "n": None}
    assert poller.status.rows_refused == 0 and poller.status.values_discarded == 2


def test_freeze_stops_the_poll_naming_table_row_and_column(
    gateway: GatewayUnderTest, source_table: tuple[Any, str]
) -> None:
    _, table = source_table
    poller = _run(gateway, table, {"columns": "discard_value", "data_type": "freeze"})
    assert gateway.rows("t") == {}
    assert poller.status.failed_polls == 1 and poller.status.rows_refused == 1
    error = poller.status.last_error or ""
    assert "'t'" in error and "row '2'" in error and "'n'" in error


def test_evolve_adds_columns_and_widens_to_string(
    gateway: GatewayUnderTest, source_table: tuple[Any, str]
) -> None:
    _, table = source_table
    poller = _run(gateway, table, "evolve")
    schema = asyncio.run(gateway.service.schemas("gw1"))["t"]
    assert schema.column_types() == {"id": "integer", "n": "string", "extra": "string"}
    assert gateway.rows("t")["2"] == {"id": 2, "n": "seven", "extra": None}
    assert poller.status.rows_refused == 0 and poller.status.failed_polls == 0


def test_a_source_integer_widened_to_numeric_becomes_a_decimal_column(
    gateway: GatewayUnderTest, source_table: tuple[Any, str]
) -> None:
    """``ALTER COLUMN n TYPE numeric(20,2)`` on the source: under the default contract the poll
    stops naming the setting to change; under ``data_type: evolve`` the column becomes a
    decimal holding the old integers and the new decimals alike (not text of mixed forms)."""
    conn, table = source_table
    conn.execute(f"ALTER TABLE {table} DROP COLUMN extra")
    conn.execute(f"ALTER TABLE {table} ALTER COLUMN n TYPE integer USING length(n)")
    conn.execute(f"UPDATE {table} SET n = 2147483647 WHERE id = 1")
    poller = _run(gateway, table, {}, declared=None)
    assert poller.status.failed_polls == 0
    assert asyncio.run(gateway.service.schemas("gw1"))["t"].column_types()["n"] == "integer"

    conn.execute(f"ALTER TABLE {table} ALTER COLUMN n TYPE numeric(20,2)")
    conn.execute(f"UPDATE {table} SET n = 5000000000.25 WHERE id = 2")
    poller = _run(gateway, table, {}, declared=None)
    assert poller.status.failed_polls == 1
    assert "contract: {data_type: evolve}" in (poller.status.last_error or "")

    poller = _run(gateway, table, {"data_type": "evolve"}, declared=None)
    assert poller.status.failed_polls == 0
    n = asyncio.run(gateway.service.schemas("gw1"))["t"].column_specs()["n"]
    assert (n.type, n.precision, n.scale) == ("decimal", 21, 2)
    assert {r: c["n"] for r, c in gateway.rows("t").items()} == {
        "1": "2147483647.00", "2": "5000000000.25", "3": "1.00"}
