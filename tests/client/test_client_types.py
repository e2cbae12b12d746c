"""Typed columns in the Python client: the replica stores, returns and accepts
Python values, and queues their canonical wire values."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from lakesync.client import Change, LakeSyncClient
from lakesync.client.errors import SchemaError
from lakesync.delta import RowDelta

ORDERS: dict[str, Any] = {
    "table": "orders",
    "columns": [
        {"name": "id", "type": "integer", "nullable": False},
        {"name": "amount", "type": "decimal", "precision": 38, "scale": 9},
        {"name": "at", "type": "timestamp"},
        {"name": "day", "type": "date"},
        {"name": "blob", "type": "bytes"},
        {"name": "note", "type": "string"},
    ],
}
BIG = 2**62 + 1
AMOUNT = Decimal("12345678901234567890123456789.123456789")
PARIS = dt.timezone(dt.timedelta(hours=1))
AT = dt.datetime(2024, 3, 1, 12, 30, 15, 123456, tzinfo=PARIS)
ROW = {"id": BIG, "amount": AMOUNT, "at": AT, "day": dt.date(1969, 7, 20), "blob": b"\x00a\xff"}
PY = {
    **ROW,
    "at": dt.datetime(2024, 3, 1, 11, 30, 15, 123456, tzinfo=dt.UTC),
}
WIRE = {
    "id": "4611686018427387905",
    "amount": "12345678901234567890123456789.123456789",
    "at": "2024-03-01T11:30:15.123456Z",
    "day": "1969-07-20",
    "blob": "AGH/",
}


def local(path: str | Path = ":memory:", schema: dict[str, Any] = ORDERS) -> LakeSyncClient:
    return LakeSyncClient(str(path), client_id="c1", schemas=[schema])


def test_writes_take_python_values_and_queue_canonical_wire_values() -> None:
    changes: list[Change] = []
    with local() as c:
        c.watch("orders", changes.extend)
        c.insert("orders", "o1", ROW)
        (entry,) = c._store.outbox(10, 1 << 20)  # the queued delta: what the gateway receives
        delta = entry.delta
        assert {cv.column: cv.value for cv in delta.columns} == WIRE
        # The deltaId covers the wire values: a replica computing it over them agrees.
        assert delta == RowDelta.create("INSERT", "orders", "o1", "c1", WIRE, delta.hlc)
        assert c.get("orders", "o1") == PY
        assert changes[0].after == PY and changes[0].before is None
        assert c.query("select * from orders") == [{"row_id": "o1", **PY, "note": None}]
        row = c.query("select id, amount, at, day, blob from orders")[0]
        assert [type(v) for v in row.values()] == [int, Decimal, dt.datetime, dt.date, bytes]
        assert row["at"].tzinfo == dt.UTC


def test_query_parameters_bind_as_the_columns_store_them() -> None:
    with local() as c:
        c.insert("orders", "o1", ROW)
        c.insert("orders", "o2", {"id": 2, "at": AT + dt.timedelta(microseconds=1)})
        assert c.query("select row_id from orders where at = ?", [AT]) == [{"row_id": "o1"}]
        assert c.query("select row_id from orders where at > ?", [AT]) == [{"row_id": "o2"}]
        assert c.query("select row_id from orders where day < ?", [dt.date(1970, 1, 1)]) == [
            {"row_id": "o1"}
        ]
        assert c.query("select row_id from orders where id = ?", [BIG]) == [{"row_id": "o1"}]
        assert c.query("select row_id from orders where amount = ?", [AMOUNT]) == [{"row_id": "o1"}]


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"id": 1, "amount": 1.5}, "write a decimal.Decimal or an int"),
        ({"id": 1, "amount": Decimal("0.0000000001")}, "needs rounding to 9 fraction digits"),
        ({"id": 1, "at": dt.datetime(2024, 1, 1)}, "naive datetime names no instant"),
        ({"id": 1, "day": "2024-01-01"}, "write a datetime.date"),
        ({"id": 1, "blob": "AAA="}, "write bytes"),
        ({"id": 2**63}, "64-bit"),
        ({"id": "1"}, "write a Python int"),
        ({"amount": Decimal(1)}, "'id' is not nullable"),
        ({"id": None}, "'id' is not nullable"),
    ],
)
def test_a_value_that_does_not_fit_is_refused_and_nothing_is_queued(
    values: dict[str, Any], needle: str
) -> None:
    with local() as c:
        with pytest.raises(SchemaError, match=needle):
            c.insert("orders", "o1", values)
        assert c.queue_depth == 0 and c.get("orders", "o1") is None


def test_an_update_compares_python_values() -> None:
    with local() as c:
        c.insert("orders", "o1", ROW)
        # The same instant in another zone and the same decimal: nothing changes.
        same = {"at": AT.astimezone(dt.UTC), "amount": AMOUNT}
        assert c.update("orders", "o1", same) is None
        change = c.update("orders", "o1", {"amount": Decimal(1)})
        assert change is not None and change.after is not None
        assert change.after["amount"] == Decimal("1.000000000")
        assert str(change.after["amount"]) == "1.000000000"


def test_remote_deltas_are_read_as_python_values() -> None:
    with local() as c:
        remote = RowDelta.create("INSERT", "orders", "o9", "other", WIRE, 1)
        c._store.apply_remote([remote], "remote", c._clock)
        assert c.get("orders", "o9") == PY
        assert c.query("select * from orders where row_id = 'o9'") == [
            {"row_id": "o9", **PY, "note": None}
        ]


def test_to_arrow_uses_the_columns_types() -> None:
    pa = pytest.importorskip("pyarrow")
    with local() as c:
        c.insert("orders", "o1", ROW)
        c.insert("orders", "o2", {"id": 3})  # nulls keep the column's type
        table = c.to_arrow("select * from orders order by row_id")
        assert table.schema.field("id").type == pa.int64()
        assert table.schema.field("amount").type == pa.decimal128(38, 9)
        assert table.schema.field("at").type == pa.timestamp("us", tz="UTC")
        assert table.schema.field("day").type == pa.date32()
        assert table.schema.field("blob").type == pa.binary()
        assert table.column("amount").to_pylist() == [AMOUNT, None]
        assert table.column("id").to_pylist() == [BIG, 3]
        frame = c.to_pandas("select id, amount from orders order by row_id")
        assert list(frame["amount"]) == [AMOUNT, None]


def test_widening_a_column_keeps_every_value(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    with local(path) as c:
        c.insert("orders", "o1", ROW)
        c.insert("orders", "o2", {"id": 7, "amount": Decimal("2.5")})
    wider = {
        "table": "orders",
        "columns": [
            {"name": "id", "type": "decimal", "precision": 38, "scale": 0},
            {"name": "amount", "type": "number"},
            *ORDERS["columns"][2:5],
            {"name": "note", "type": "string"},
        ],
    }
    with local(path, wider) as c:
        assert c.get("orders", "o1") == {**PY, "id": Decimal(BIG), "amount": float(AMOUNT)}
        assert c.query("select id, amount from orders where row_id = 'o2'") == [
            {"id": Decimal(7), "amount": 2.5}
        ]
        c.insert("orders", "o3", {"id": Decimal(BIG + 1), "amount": 1.25})
        assert c.get("orders", "o3") == {"id": Decimal(BIG + 1), "amount": 1.25}
    narrower = {"table": "orders", "columns": [{"name": "id", "type": "integer"}]}
    with pytest.raises(SchemaError, match="cannot change type from decimal"):
        local(path, narrower)


def test_the_async_client_reads_and_writes_python_values() -> None:
    import asyncio

    from lakesync.client import AsyncLakeSyncClient

    async def run() -> None:
        async with AsyncLakeSyncClient(":memory:", client_id="c1", schemas=[ORDERS]) as c:
            await c.insert("orders", "o1", ROW)
            assert await c.get("orders", "o1") == PY
            assert await c.query("select id, day from orders") == [
                {"id": BIG, "day": dt.date(1969, 7, 20)}
            ]

    asyncio.run(run())


def test_a_column_widened_to_string_reads_the_same_through_get_and_query(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    schema = {
        "table": "t",
        "columns": [{"name": "v", "type": "json"}, {"name": "n", "type": "integer"}],
    }
    with local(path, schema) as c:
        c.insert("t", "a", {"v": True, "n": 2**62 + 1})
        c.insert("t", "b", {"v": {"k": [1, 2.5]}, "n": 5})
    wider = {
        "table": "t",
        "columns": [{"name": "v", "type": "string"}, {"name": "n", "type": "number"}],
    }
    with local(path, wider) as c:
        assert c.get("t", "a") == {"v": "true", "n": 4.611686018427388e18}
        assert c.query("select v, n from t order by row_id") == [
            {"v": "true", "n": 4.611686018427388e18},
            {"v": '{"k":[1,2.5]}', "n": 5},
        ]
