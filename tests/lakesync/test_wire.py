"""HTTP bodies (SPEC §5): push/pull codecs, error bodies, and errors that name the JSON path."""

from __future__ import annotations

import json
from typing import Any

import pytest
from delta_strategies import row_deltas
from hypothesis import given
from hypothesis import strategies as st

from lakesync import wire
from lakesync.delta import RowDelta
from lakesync.errors import ValidationError

INSERT = RowDelta.create(
    "INSERT", "users", "row-1", "client-1", {"name": "Alice", "age": 30, "active": True}, 1_000_000
)
UPDATE = RowDelta.create("UPDATE", "users", "row-1", "client-1", {"age": 31}, 1_000_000)


def push_body(**changes: Any) -> bytes:
    body: dict[str, Any] = {"clientId": "client-1", "deltas": [INSERT.to_wire(), UPDATE.to_wire()]}
    body.update(changes)
    return json.dumps(body).encode()


def test_spec_vectors_survive_the_push_body() -> None:
    assert INSERT.delta_id == "ea49110ec03d9efc670f11ed6bab11d07d6de5ed11e6be1da8812d3fdf4da712"
    client, deltas, last = wire.decode_push(push_body(lastSeenHlc="18446744073709551615"))
    assert (client, deltas, last) == ("client-1", [INSERT, UPDATE], 2**64 - 1)


def test_push_without_last_seen_hlc() -> None:
    assert wire.decode_push(push_body())[2] is None
    assert wire.decode_push(push_body(lastSeenHlc=None))[2] is None


def test_push_tolerates_numeric_hlcs() -> None:
    d = INSERT.to_wire()
    d["hlc"] = INSERT.hlc
    _, deltas, last = wire.decode_push(push_body(deltas=[d], lastSeenHlc=7))
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
        (push_body(deltas=[INSERT.to_wire(), {"op": "INSERT"}]), "$.deltas[1]"),
        (
            push_body(deltas=[{**INSERT.to_wire(), "columns": [{"value": 1}]}]),
            "$.deltas[0].columns[0]",
        ),
        (push_body(deltas=[INSERT.to_wire(), {**UPDATE.to_wire(), "op": "MERGE"}]), "deltas[1].op"),
        (push_body(deltas=[INSERT.to_wire(), {**UPDATE.to_wire(), "hlc": "x"}]), "deltas[1].hlc"),
        (push_body(deltas=[{**INSERT.to_wire(), "hlc": 1.5}]), "$.deltas[0].hlc"),
        (push_body(deltas=[{**INSERT.to_wire(), "hlc": 10**30}]), "deltas[0].hlc"),
        (push_body(lastSeenHlc="soon"), "lastSeenHlc"),
        (push_body(lastSeenHlc=-1), "lastSeenHlc"),
    ],
)
def test_decode_push_errors_name_the_json_path(body: bytes, needle: str) -> None:
    with pytest.raises(ValidationError) as info:
        wire.decode_push(body)
    assert needle in info.value.message
    assert info.value.status == 400


def test_decode_push_wrong_delta_id_names_the_delta() -> None:
    bad = {**UPDATE.to_wire(), "deltaId": "f" * 64}
    with pytest.raises(Exception, match=r"deltas\[1\]\.deltaId") as info:
        wire.decode_push(push_body(deltas=[INSERT.to_wire(), bad]))
    assert info.value.status == 422  # type: ignore[attr-defined]


@given(
    st.text(min_size=1, max_size=10),
    st.lists(row_deltas(), max_size=5),
    st.none() | st.integers(0, 2**64 - 1),
)
def test_push_round_trip(client: str, deltas: list[RowDelta], last: int | None) -> None:
    body = wire.encode_push(client, deltas, last)
    assert wire.decode_push(body) == (client, deltas, last)
    raw = json.loads(body)
    assert raw["clientId"] == client
    assert raw["lastSeenHlc"] == (None if last is None else str(last))
    assert all(isinstance(d["hlc"], str) for d in raw["deltas"])


@given(st.lists(row_deltas(), max_size=5), st.integers(0, 2**64 - 1), st.booleans())
def test_pull_response_round_trip(deltas: list[RowDelta], server_hlc: int, has_more: bool) -> None:
    body = wire.encode_pull_response(deltas, server_hlc, has_more)
    raw = json.loads(body)
    assert set(raw) == {"deltas", "serverHlc", "hasMore"}
    assert raw["serverHlc"] == str(server_hlc)
    assert raw["hasMore"] is has_more
    assert raw["deltas"] == [d.to_wire() for d in deltas]
    assert wire.decode_pull_response(body) == (deltas, server_hlc, has_more)


@given(st.integers(0, 2**64 - 1), st.integers(0, 10_000), st.lists(row_deltas(), max_size=3))
def test_push_response_round_trip(server_hlc: int, accepted: int, deltas: list[RowDelta]) -> None:
    body = wire.encode_push_response(server_hlc, accepted, deltas)
    raw = json.loads(body)
    assert set(raw) == {"serverHlc", "accepted", "deltas"}
    assert raw["serverHlc"] == str(server_hlc)
    assert wire.decode_push_response(body) == (server_hlc, accepted, deltas)


def test_pull_response_rejects_a_tampered_delta() -> None:
    raw = json.loads(wire.encode_pull_response([UPDATE], 5, False))
    raw["deltas"][0]["columns"][0]["value"] = 99
    with pytest.raises(Exception, match=r"deltas\[0\]\.deltaId"):
        wire.decode_pull_response(json.dumps(raw).encode())


def test_error_body() -> None:
    body = wire.encode(wire.ErrorBody("bad thing", "VALIDATION_ERROR"))
    assert json.loads(body) == {"error": "bad thing", "code": "VALIDATION_ERROR"}
    assert json.loads(body) == ValidationError("bad thing").to_body()
