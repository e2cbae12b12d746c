"""The client's fast decoders agree with the core's and still reject unsafe identifiers."""

from __future__ import annotations

import pytest

from client._decode import (
    decode_outbox,
    decode_pull_reply,
    decode_push_reply,
    decode_sync_response,
    encode_outbox,
)
from client.errors import SchemaError, ValidationError
from lakesync.delta import RowDelta
from lakesync.wire import encode_pull_response, encode_push_response
from lakesync.wsframes import decode_response, encode_response

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


def test_pull_and_proto_decoders_match_the_core() -> None:
    assert decode_pull_reply(encode_pull_response(DELTAS, 99, True)) == (DELTAS, 99, True)
    frame = encode_response(DELTAS, 5, False)
    assert decode_sync_response(frame) == decode_response(frame) == (DELTAS, 5, False)
    assert decode_push_reply(encode_push_response(42, 3, DELTAS)) == (42, 3)
    for d in DELTAS:
        assert decode_outbox(encode_outbox(d)) == d


def test_unsafe_identifiers_from_a_gateway_are_rejected() -> None:
    body = encode_pull_response(DELTAS[:1], 1, False).replace(b'"users"', b'"x\\"; drop"')
    with pytest.raises(SchemaError):
        decode_pull_reply(body)
    with pytest.raises(ValidationError):
        decode_pull_reply(b'{"deltas": 1}')
    with pytest.raises(ValidationError):
        decode_sync_response(b"\xff\xff\xff")
