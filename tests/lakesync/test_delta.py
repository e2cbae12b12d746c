"""RowDelta (docs/protocol.md §3): wire validation (as the gateway reads a push), deltaId checks,
round-trips and extraction."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from delta_strategies import row_deltas
from hypothesis import given
from hypothesis import strategies as st

from lakesync.delta import (
    ColumnValue,
    RowDelta,
    delta_id,
    extract_delta,
    validate_gateway_id,
    validate_identifier,
)
from lakesync.errors import SchemaError, ValidationError
from tests.wire_json import as_json, verified

UPDATE_WIRE: dict[str, Any] = {
    "op": "UPDATE",
    "table": "users",
    "rowId": "row-1",
    "clientId": "client-1",
    "columns": [{"column": "age", "value": 31}],
    "hlc": "1000000",
    "deltaId": "fc92f1a830e24be5711a0d093f3af271daa84d32dc05c4d47649533a11dd6e7f",
}


def wire(**changes: Any) -> dict[str, Any]:
    """The UPDATE vector with changes; the deltaId is recomputed unless given explicitly."""
    obj = copy.deepcopy(UPDATE_WIRE)
    obj.update(changes)
    if "deltaId" not in changes:
        cols = obj["columns"] if isinstance(obj["columns"], list) else []
        obj["deltaId"] = delta_id(
            obj["clientId"], obj["hlc"], str(obj["table"]), obj["rowId"], cols
        )
    return obj


def test_from_wire_spec_vector() -> None:
    d = verified(UPDATE_WIRE)
    assert d == RowDelta(
        "UPDATE",
        "users",
        "row-1",
        "client-1",
        (ColumnValue("age", 31),),
        1_000_000,
        UPDATE_WIRE["deltaId"],
    )
    assert d.values() == {"age": 31}
    assert as_json(d) == UPDATE_WIRE


def test_from_wire_tolerates_a_numeric_hlc() -> None:
    d = verified({**UPDATE_WIRE, "hlc": 1_000_000})
    assert d.hlc == 1_000_000
    assert as_json(d)["hlc"] == "1000000"


def test_create_matches_spec_vector_from_mapping_or_columns() -> None:
    from_map = RowDelta.create("UPDATE", "users", "row-1", "client-1", {"age": 31}, 1_000_000)
    from_cols = RowDelta.create(
        "UPDATE", "users", "row-1", "client-1", [ColumnValue("age", 31)], 1_000_000
    )
    assert from_map == from_cols
    assert from_map.delta_id == UPDATE_WIRE["deltaId"]


@pytest.mark.parametrize(
    ("obj", "error", "needle"),
    [
        (wire(op="UPSERT"), ValidationError, "Invalid enum value 'UPSERT' - at `$.deltas[0].op`"),
        (wire(op="update"), ValidationError, "op"),
        (wire(table="t; drop table x"), SchemaError, "t; drop table x"),
        (wire(table="1users"), SchemaError, "table"),
        (wire(table="a" * 65), SchemaError, "table"),
        (wire(columns=[{"column": "a b", "value": 1}]), SchemaError, "column"),
        (wire(columns=[{"column": 'x"; --', "value": 1}]), SchemaError, "column"),
        (wire(op="DELETE"), ValidationError, "DELETE carries no columns"),
        (
            wire(columns=[{"column": "a", "value": 1}, {"column": "a", "value": 2}]),
            ValidationError,
            "appears twice",
        ),
        (wire(deltaId="0" * 64), SchemaError, "deltaId"),
        (wire(deltaId=UPDATE_WIRE["deltaId"], hlc="1000001"), SchemaError, "deltaId"),
        (wire(rowId=""), ValidationError, "rowId"),
        (wire(rowId="r" * 1025), ValidationError, "rowId"),
        (wire(clientId=""), ValidationError, "clientId"),
        (wire(clientId="a\x00b"), ValidationError, "clientId"),
        (wire(rowId="a\x00b"), ValidationError, "rowId"),
        (wire(hlc="abc"), ValidationError, "hlc"),
        (wire(hlc="-5"), ValidationError, "hlc"),
        (wire(hlc=str(2**64)), ValidationError, "hlc"),
        (wire(hlc=-1), ValidationError, "hlc"),
        (wire(hlc=1.5), ValidationError, "hlc"),
        (wire(hlc=None), ValidationError, "hlc"),
        (wire(table=5), ValidationError, "table"),
        (wire(columns={"age": 31}), ValidationError, "columns"),
        ({k: v for k, v in UPDATE_WIRE.items() if k != "deltaId"}, ValidationError, "deltaId"),
        ({k: v for k, v in UPDATE_WIRE.items() if k != "rowId"}, ValidationError, "rowId"),
        ({k: v for k, v in UPDATE_WIRE.items() if k != "op"}, ValidationError, "op"),
        ([UPDATE_WIRE], ValidationError, "object"),
        ("delta", ValidationError, "object"),
    ],
)
def test_from_wire_rejects(obj: object, error: type[Exception], needle: str) -> None:
    with pytest.raises(error) as info:
        verified(obj)
    assert type(info.value) is error
    assert needle in str(info.value)


def test_hostile_identifier_is_a_422_schema_error() -> None:
    with pytest.raises(SchemaError) as info:
        verified(wire(table="t; drop table x"))
    assert info.value.status == 422
    assert info.value.code == "SCHEMA_ERROR"


@pytest.mark.parametrize("name", ["a", "_", "A_1", "x" * 64, "_" + "9" * 63])
def test_validate_identifier_accepts(name: str) -> None:
    assert validate_identifier(name, "column") == name


@pytest.mark.parametrize("name", ["", "1a", "a-b", "a b", "é", "x" * 65, "a\n", None, 5])
def test_validate_identifier_rejects(name: object) -> None:
    with pytest.raises(SchemaError, match="column"):
        validate_identifier(name, "column")


@pytest.mark.parametrize("name", ["", "gw-1", "gw/../x", "g" * 65, "g" * 300, "gw 1", None])
def test_gateway_ids_follow_the_identifier_rule_as_400s(name: object) -> None:
    with pytest.raises(ValidationError, match="invalid gateway id") as info:
        validate_gateway_id(name)
    assert info.value.status == 400 and len(info.value.message) < 200
    assert validate_gateway_id("Gw_1") == "Gw_1"


@given(row_deltas())
def test_to_wire_from_wire_round_trip(delta: RowDelta) -> None:
    obj = as_json(delta)
    assert isinstance(obj["hlc"], str)
    assert set(obj) == {"op", "table", "rowId", "clientId", "columns", "hlc", "deltaId"}
    assert verified(obj) == delta


@given(row_deltas(), st.integers(0, 2**64 - 1))
def test_changing_the_hlc_invalidates_the_delta_id(delta: RowDelta, other: int) -> None:
    obj = {**as_json(delta), "hlc": str(other)}
    if other == delta.hlc:
        assert verified(obj) == delta
    else:
        with pytest.raises(SchemaError):
            verified(obj)


KW: dict[str, Any] = {"table": "todos", "row_id": "r1", "client_id": "c1", "hlc": 42}


def test_extract_insert_carries_all_columns() -> None:
    d = extract_delta(None, {"a": 1, "b": None}, **KW)
    assert d is not None
    assert d.op == "INSERT"
    assert d.values() == {"a": 1, "b": None}
    assert (d.table, d.row_id, d.client_id, d.hlc) == ("todos", "r1", "c1", 42)
    assert d.delta_id == delta_id("c1", 42, "todos", "r1", as_json(d)["columns"])


def test_extract_update_carries_only_changed_columns() -> None:
    d = extract_delta({"a": 1, "b": "x", "c": [1]}, {"a": 1, "b": "y", "c": [1], "n": 0}, **KW)
    assert d is not None
    assert d.op == "UPDATE"
    assert d.values() == {"b": "y", "n": 0}


def test_extract_delete() -> None:
    d = extract_delta({"a": 1}, None, **KW)
    assert d is not None
    assert d.op == "DELETE"
    assert d.columns == ()


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (None, None),
        ({"a": 1}, {"a": 1}),
        ({"a": {"x": 1, "y": 2}}, {"a": {"y": 2, "x": 1}}),
        ({"a": 1}, {"a": 1.0}),  # JSON (and JavaScript) cannot tell 1 from 1.0
    ],
)
def test_extract_no_change_is_none(
    before: dict[str, Any] | None, after: dict[str, Any] | None
) -> None:
    assert extract_delta(before, after, **KW) is None


@pytest.mark.parametrize(("old", "new"), [(1, True), (True, 1), (0, False), (None, 0), ("1", 1)])
def test_extract_distinguishes_json_types(old: Any, new: Any) -> None:
    d = extract_delta({"a": old}, {"a": new}, **KW)
    assert d is not None
    assert d.values() == {"a": new}
    assert type(d.values()["a"]) is type(new)


def test_row_id_with_nul_is_rejected() -> None:
    with pytest.raises(ValidationError, match="NUL"):
        RowDelta.create("INSERT", "t", "a\x00b", "c", {"x": 1}, 1)


@pytest.mark.parametrize("field", ["row_id", "client_id"])
@pytest.mark.parametrize("bad", ["\ud800", "ok\udfffok", "x\x00"])
def test_keys_must_be_storable_text(field: str, bad: str) -> None:
    keys = {"row_id": "r1", "client_id": "c1"} | {field: bad}
    with pytest.raises(ValidationError, match="rowId" if field == "row_id" else "clientId"):
        RowDelta.create("INSERT", "t", keys["row_id"], keys["client_id"], {"x": 1}, 1)
    # Non-ASCII that is valid Unicode (emoji are surrogate pairs in UTF-16, not here) is fine.
    ok = {"row_id": "r1", "client_id": "c1"} | {field: "é😀"}
    RowDelta.create("INSERT", "t", ok["row_id"], ok["client_id"], {"x": 1}, 1)
