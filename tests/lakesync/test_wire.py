"""The delta codec of the HTTP API (SPEC §5) as production runs it: the gateway reads push
bodies verified (errors name the JSON path), the client reads replies and its outbox trusted."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from delta_strategies import row_deltas
from hypothesis import given
from hypothesis import strategies as st

from lakesync import wire
from lakesync.delta import CellError, RowDelta
from lakesync.errors import SchemaError, ValidationError
from lakesync.wsframes import decode_response, encode_response
from tests.wire_json import as_json

INSERT = RowDelta.create(
    "INSERT", "users", "row-1", "client-1", {"name": "Alice", "age": 30, "active": True}, 1_000_000
)
UPDATE = RowDelta.create("UPDATE", "users", "row-1", "client-1", {"age": 31}, 1_000_000)
DELTAS = [
    RowDelta.create(
        "INSERT",
        "users",
        "row-1",
        "client-1",
        {"name": "Ålice", "age": 30, "tags": {"a": [1, None]}},
        1_000_000,
    ),
    RowDelta.create(
        "UPDATE", "users", "row-1", "client-1", {"age": 31.5, "ok": True}, (1 << 64) - 1
    ),
    RowDelta.create("DELETE", "users", "row-1", "client-2", {}, 7),
]


def push_body(**changes: Any) -> bytes:
    body: dict[str, Any] = {"clientId": "client-1", "deltas": [as_json(INSERT), as_json(UPDATE)]}
    body.update(changes)
    return json.dumps(body).encode()


def read_push(body: bytes) -> tuple[str, list[RowDelta], int | None]:
    """What the gateway's push route does with a body (lakesync.api.controllers.sync)."""
    req = wire.decode_push_request(body)
    deltas, last = wire.push_deltas(req)
    return req.client_id, deltas, last


def test_spec_vectors_survive_the_push_body() -> None:
    assert INSERT.delta_id == "ea49110ec03d9efc670f11ed6bab11d07d6de5ed11e6be1da8812d3fdf4da712"
    client, deltas, last = read_push(push_body(lastSeenHlc="18446744073709551615"))
    assert (client, deltas, last) == ("client-1", [INSERT, UPDATE], 2**64 - 1)


def test_push_without_last_seen_hlc() -> None:
    assert read_push(push_body())[2] is None
    assert read_push(push_body(lastSeenHlc=None))[2] is None


def test_push_tolerates_numeric_hlcs() -> None:
    d = as_json(INSERT)
    d["hlc"] = INSERT.hlc
    _, deltas, last = read_push(push_body(deltas=[d], lastSeenHlc=7))
    assert deltas == [INSERT]
    assert last == 7


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"not json", "not valid JSON"),
        (b"", "not valid JSON"),
        (b"[]", "Expected `object`"),
        (push_body(clientId=5), "$.clientId"),
        (json.dumps({"deltas": []}).encode(), "clientId"),
        (push_body(deltas={}), "$.deltas"),
        (push_body(deltas=[as_json(INSERT), {"op": "INSERT"}]), "$.deltas[1]"),
        (
            push_body(deltas=[{**as_json(INSERT), "columns": [{"value": 1}]}]),
            "$.deltas[0].columns[0]",
        ),
        (push_body(deltas=[as_json(INSERT), {**as_json(UPDATE), "op": "MERGE"}]), "deltas[1].op"),
        (push_body(deltas=[as_json(INSERT), {**as_json(UPDATE), "hlc": "x"}]), "deltas[1].hlc"),
        (push_body(deltas=[{**as_json(INSERT), "hlc": 1.5}]), "$.deltas[0].hlc"),
        (push_body(deltas=[{**as_json(INSERT), "hlc": 10**30}]), "deltas[0].hlc"),
        (push_body(lastSeenHlc="soon"), "lastSeenHlc"),
        (push_body(lastSeenHlc=-1), "lastSeenHlc"),
    ],
)
def test_push_errors_name_the_json_path(body: bytes, needle: str) -> None:
    with pytest.raises(ValidationError) as info:
        read_push(body)
    assert needle in info.value.message
    assert info.value.status == 400


def test_push_with_a_wrong_delta_id_names_the_delta() -> None:
    bad = {**as_json(UPDATE), "deltaId": "f" * 64}
    with pytest.raises(SchemaError, match=r"deltas\[1\]\.deltaId") as info:
        read_push(push_body(deltas=[as_json(INSERT), bad]))
    assert info.value.status == 422


@given(
    st.text(min_size=1, max_size=10),
    st.lists(row_deltas(), max_size=5),
    st.none() | st.integers(0, 2**64 - 1),
)
def test_push_round_trip(client: str, deltas: list[RowDelta], last: int | None) -> None:
    body = wire.encode_push(client, deltas, last)
    assert read_push(body) == (client, deltas, last)
    raw = json.loads(body)
    assert raw["clientId"] == client
    assert raw["lastSeenHlc"] == (None if last is None else str(last))
    assert all(isinstance(d["hlc"], str) for d in raw["deltas"])


@given(st.lists(row_deltas(), max_size=5), st.integers(0, 2**64 - 1), st.booleans())
def test_pull_response_round_trip(deltas: list[RowDelta], server_hlc: int, has_more: bool) -> None:
    body = msgspec.json.encode(wire.pull_response(deltas, server_hlc, has_more))
    raw = json.loads(body)
    assert set(raw) == {"deltas", "serverHlc", "hasMore"}
    assert raw["serverHlc"] == str(server_hlc)
    assert raw["hasMore"] is has_more
    assert raw["deltas"] == [as_json(d) for d in deltas]
    assert wire.decode_pull_response(body) == (deltas, server_hlc, has_more)


@given(st.integers(0, 2**64 - 1), st.integers(0, 10_000), st.lists(row_deltas(), max_size=3))
def test_push_response_round_trip(server_hlc: int, accepted: int, deltas: list[RowDelta]) -> None:
    body = msgspec.json.encode(wire.push_response(server_hlc, accepted, deltas))
    raw = json.loads(body)
    assert set(raw) == {"serverHlc", "accepted", "deltas"}
    assert raw["serverHlc"] == str(server_hlc)
    assert raw["deltas"] == [as_json(d) for d in deltas]
    assert wire.decode_push_response(body) == (server_hlc, accepted)


def test_json_and_protobuf_replies_read_the_same_deltas() -> None:
    body = msgspec.json.encode(wire.pull_response(DELTAS, 99, True))
    assert wire.decode_pull_response(body) == (DELTAS, 99, True)
    assert decode_response(encode_response(DELTAS, 5, False)) == (DELTAS, 5, False)


@given(row_deltas())
def test_outbox_round_trip(delta: RowDelta) -> None:
    assert wire.decode_delta(wire.encode_delta(delta)) == delta


def test_client_reads_trust_the_gateways_delta_ids() -> None:
    # The gateway recomputed every deltaId when it stored the delta: a client does not.
    raw = json.loads(msgspec.json.encode(wire.pull_response([UPDATE], 5, False)))
    raw["deltas"][0]["deltaId"] = "f" * 64
    (read,), _, _ = wire.decode_pull_response(json.dumps(raw).encode())
    assert read.delta_id == "f" * 64 and read.values() == UPDATE.values()


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"table": 'x"; drop'}, SchemaError),
        ({"columns": [{"column": "a b", "value": 1}]}, SchemaError),
        ({"op": "MERGE"}, ValidationError),
        ({"rowId": ""}, ValidationError),
        ({"clientId": ""}, ValidationError),
        ({"hlc": "-1"}, ValidationError),
    ],
)
def test_client_reads_still_refuse_what_is_unsafe_for_a_replica(
    change: dict[str, Any], error: type[Exception]
) -> None:
    raw = json.loads(msgspec.json.encode(wire.pull_response([UPDATE], 5, False)))
    raw["deltas"][0].update(change)
    with pytest.raises(error):
        wire.decode_pull_response(json.dumps(raw).encode())


@pytest.mark.parametrize("body", [b'{"deltas": 1}', b"nope", b"{}"])
def test_malformed_pull_replies_are_validation_errors(body: bytes) -> None:
    with pytest.raises(ValidationError, match="pull response"):
        wire.decode_pull_response(body)


def test_trusted_cells_no_replica_can_hold_read_null_and_are_reported() -> None:
    body = (
        b'{"deltas":[{"op":"INSERT","table":"t","rowId":"r","clientId":"c","columns":'
        b'[{"column":"n","value":1e400},{"column":"ok","value":1.0}],"hlc":"5","deltaId":"d"}],'
        b'"serverHlc":"9","hasMore":false}'
    )
    errors: list[CellError] = []
    (d,), server_hlc, _ = wire.decode_pull_response(body, errors.append)
    assert (d.values(), server_hlc) == ({"n": None, "ok": 1}, 9)
    assert [(e.table, e.row_id, e.column, e.delta_id) for e in errors] == [("t", "r", "n", "d")]
    assert "not valid UTF-8 JSON" in errors[0].reason


def test_error_body() -> None:
    body = msgspec.json.encode(wire.ErrorBody("bad thing", "VALIDATION_ERROR"))
    assert json.loads(body) == {"error": "bad thing", "code": "VALIDATION_ERROR"}
    assert json.loads(body) == {"error": "bad thing", "code": "VALIDATION_ERROR"}
