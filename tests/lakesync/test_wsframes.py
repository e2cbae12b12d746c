"""WebSocket frames (docs/protocol.md §9): the protocol's byte vectors, round-trips, broadcast
tag, bad frames."""

from __future__ import annotations

from typing import Any

import pytest
from delta_strategies import identifiers, json_values, row_deltas
from hypothesis import given
from hypothesis import strategies as st

from lakesync import wsframes
from lakesync.canonical import canonical_json
from lakesync.delta import CellError, RowDelta, delta_id, read_delta
from lakesync.errors import SchemaError, ValidationError
from lakesync.hlc import encode
from lakesync.proto import lakesync_pb2 as pb
from lakesync.wire import json_cell
from tests.wire_json import as_json

UPDATE = RowDelta.create("UPDATE", "users", "row-1", "client-1", {"age": 31}, 1_000_000)
UPDATE_ID = "fc92f1a830e24be5711a0d093f3af271daa84d32dc05c4d47649533a11dd6e7f"
PULL_FRAME = bytes.fromhex("020a0263311805")
RESPONSE = bytes.fromhex("1101000068e5cf8b011801")
UPDATE_PROTO = bytes.fromhex(
    "0802"
    "1205"
    "7573657273"
    "1a05"
    "726f772d31"
    "2209"
    "0a03616765"
    "12023331"
    "29"
    "40420f0000000000"
    "3208"
    "636c69656e742d31"
    "3a40"
) + UPDATE_ID.encode("ascii")


def test_pull_frame_vector() -> None:
    assert wsframes.encode_pull("c1", 0, 5) == PULL_FRAME
    assert wsframes.decode_client_frame(PULL_FRAME) == wsframes.SyncPullMsg("c1", 0, 5)


def test_sync_response_vector() -> None:
    server_hlc = encode(1_700_000_000_000, 1)
    assert wsframes.encode_response([], server_hlc, True) == RESPONSE
    assert wsframes.decode_server_frame(RESPONSE) == wsframes.ServerFrame(
        False, [], server_hlc, True
    )
    assert wsframes.decode_response(RESPONSE) == ([], server_hlc, True)


def test_broadcast_is_tagged_0x03() -> None:
    server_hlc = encode(1_700_000_000_000, 1)
    frame = wsframes.encode_response([], server_hlc, True, broadcast=True)
    assert frame == b"\x03" + RESPONSE
    assert wsframes.decode_server_frame(frame) == wsframes.ServerFrame(True, [], server_hlc, True)


def test_update_row_delta_vector() -> None:
    assert UPDATE.delta_id == UPDATE_ID
    assert wsframes.delta_to_proto(UPDATE).SerializeToString() == UPDATE_PROTO
    assert wsframes.delta_from_proto(pb.RowDelta.FromString(UPDATE_PROTO)) == UPDATE


def test_push_frame_embeds_the_row_delta_bytes() -> None:
    frame = wsframes.encode_push("client-1", [UPDATE], 0)
    client = b"\x0a\x08client-1"
    assert frame == b"\x01" + client + b"\x12" + bytes([len(UPDATE_PROTO)]) + UPDATE_PROTO
    assert wsframes.decode_client_frame(frame) == wsframes.SyncPushMsg("client-1", [UPDATE], 0)


def test_default_values_are_omitted() -> None:
    assert wsframes.encode_pull("", 0, 0) == b"\x02"
    assert wsframes.decode_client_frame(b"\x02") == wsframes.SyncPullMsg("", 0, 0)


def test_an_empty_gateways_reply_is_not_an_empty_frame() -> None:
    # Nothing stored yet: no deltas, server_hlc 0. proto3 would encode that as zero bytes,
    # which the TypeScript client ignores (it waits for a frame of at least two bytes).
    reply = wsframes.encode_response([], 0, False)
    assert reply == bytes.fromhex("11 0000000000000000")
    assert wsframes.decode_server_frame(reply) == wsframes.ServerFrame(False, [], 0, False)
    assert pb.SyncResponse.FromString(reply) == pb.SyncResponse()  # plain protobuf reads it too
    broadcast = wsframes.encode_response([], 0, True, broadcast=True)
    assert wsframes.decode_server_frame(broadcast) == wsframes.ServerFrame(True, [], 0, True)


@given(st.text(max_size=12), st.lists(row_deltas(), max_size=4), st.integers(0, 2**64 - 1))
def test_push_round_trip(client: str, deltas: list[RowDelta], last: int) -> None:
    frame = wsframes.encode_push(client, deltas, last)
    assert frame[0] == wsframes.TAG_PUSH
    msg = wsframes.decode_client_frame(frame)
    assert isinstance(msg, wsframes.SyncPushMsg)
    assert (msg.client_id, msg.last_seen_hlc) == (client, last)
    assert js_equal(msg.deltas, deltas)


@given(st.text(max_size=12), st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1))
def test_pull_round_trip(client: str, since: int, max_deltas: int) -> None:
    frame = wsframes.encode_pull(client, since, max_deltas)
    assert wsframes.decode_client_frame(frame) == wsframes.SyncPullMsg(client, since, max_deltas)


@given(st.lists(row_deltas(), max_size=4), st.integers(0, 2**64 - 1), st.booleans(), st.booleans())
def test_response_round_trip(
    deltas: list[RowDelta], server_hlc: int, has_more: bool, broadcast: bool
) -> None:
    frame = wsframes.encode_response(deltas, server_hlc, has_more, broadcast)
    assert len(frame) >= 9 + broadcast  # server_hlc is always on the wire (docs/protocol.md §9)
    assert (frame[0] == wsframes.TAG_BROADCAST) == broadcast
    decoded = wsframes.decode_server_frame(frame)
    assert (decoded.broadcast, decoded.server_hlc, decoded.has_more) == (
        broadcast,
        server_hlc,
        has_more,
    )
    assert js_equal(decoded.deltas, deltas)
    # Values travel as canonical JSON, so the deltaIds recompute on the far side.
    assert [d.delta_id for d in decoded.deltas] == [d.delta_id for d in deltas]


def js_equal(a: list[RowDelta], b: list[RowDelta]) -> bool:
    """Equal as JavaScript sees them: values travel as JS-formatted JSON, so a float such as
    6.054791753897522e16 comes back as the integer JavaScript prints (60547917538975220)."""
    return [canonical_json(as_json(d)) for d in a] == [canonical_json(as_json(d)) for d in b]


def _raw_delta(value: bytes, op: Any = pb.INSERT) -> bytes:
    msg = pb.RowDelta(
        op=op,
        table="t",
        row_id="r",
        client_id="c",
        hlc=5,
        columns=[pb.ColumnDelta(column="a", value=value)],
        delta_id=delta_id("c", 5, "t", "r", [{"column": "a", "value": None}]),
    )
    return b"\x01" + pb.SyncPush(client_id="c", deltas=[msg]).SerializeToString()


@pytest.mark.parametrize(
    ("frame", "needle"),
    [
        (b"", "empty"),
        (b"\x04\x0a\x02c1", "unknown WebSocket frame tag 0x04"),
        (b"\x03", "unknown WebSocket frame tag 0x03"),  # broadcasts only flow server → client
        (b"\x01\x0a\x05ab", "malformed protobuf"),
        (b"\x02\x0a\x02\xff\xfe", "malformed protobuf"),  # a string field that is not UTF-8
        (b"\x02\xff\xff\xff", "malformed protobuf"),
        (_raw_delta(b"\xff"), "not valid UTF-8 JSON"),
        (_raw_delta(b"{nope"), "not valid UTF-8 JSON"),
        (_raw_delta(b"NaN"), "not valid UTF-8 JSON"),
        (_raw_delta(b"-Infinity"), "not valid UTF-8 JSON"),
        (_raw_delta(b"1e400"), "not valid UTF-8 JSON"),  # Python's json would make it inf
        (_raw_delta(b'"\\ud800"'), "not valid UTF-8 JSON"),  # lone surrogate: no UTF-8 form
        (_raw_delta(b"null", op=pb.UNSPECIFIED), "op"),
        (_raw_delta(b"null", op=9), "op"),
    ],
)
def test_bad_client_frames_are_validation_errors(frame: bytes, needle: str) -> None:
    with pytest.raises(ValidationError) as info:
        wsframes.decode_client_frame(frame)
    assert needle in info.value.message


def test_a_frame_with_a_wrong_delta_id_is_a_schema_error() -> None:
    msg = wsframes.delta_to_proto(UPDATE)
    msg.hlc += 1
    frame = b"\x01" + pb.SyncPush(client_id="client-1", deltas=[msg]).SerializeToString()
    with pytest.raises(SchemaError, match=r"deltas\[0\]\.deltaId"):
        wsframes.decode_client_frame(frame)


def test_a_frame_with_a_hostile_table_is_a_schema_error() -> None:
    msg = wsframes.delta_to_proto(UPDATE)
    msg.table = "users; drop table users"
    with pytest.raises(SchemaError, match="users; drop table users"):
        wsframes.decode_client_frame(b"\x01" + pb.SyncPush(deltas=[msg]).SerializeToString())


@pytest.mark.parametrize("frame", [b"\xff\xff", b"\x03\x0a\x05ab", b"\x11\x01"])
def test_bad_server_frames_are_validation_errors(frame: bytes) -> None:
    with pytest.raises(ValidationError):
        wsframes.decode_server_frame(frame)


_raw_cells = st.one_of(
    st.just(b""),
    st.sampled_from([b"1e400", b"1.0", b"-0", b"9007199254740993", b"[[[[1]]]]", b"{", b"\xff"]),
    json_values.map(canonical_json).map(str.encode),
)
_names = st.one_of(identifiers, st.sampled_from(["", "9bad", "x" * 65, "a-b"]))


@given(
    st.integers(0, 3),
    _names,
    st.sampled_from(["", "r1"]),
    st.sampled_from(["", "c1"]),
    st.lists(st.tuples(_names, _raw_cells), max_size=4),
    st.integers(0, 2**64 - 1),
)
def test_a_trusted_read_of_a_gateway_delta_equals_the_general_read(
    op: int, table: str, row_id: str, client_id: str, cells: list[tuple[str, bytes]], hlc: int
) -> None:
    """:func:`read_trusted_json_delta` (the common case read inline) gives what the general
    trusted read gives: the same delta, the same reported cells, or the same error."""
    msg = pb.RowDelta(
        op=op,
        table=table,
        row_id=row_id,
        client_id=client_id,
        hlc=hlc,
        delta_id="d",
        columns=[pb.ColumnDelta(column=n, value=v) for n, v in cells],
    )

    def read(fast: bool) -> tuple[object, list[CellError]]:
        errors: list[CellError] = []
        try:
            if fast:
                got: object = wsframes.delta_from_proto(msg, trusted=True, report=errors.append)
            else:
                got = read_delta(
                    wsframes._PB_TO_OP.get(op, str(op)),
                    table,
                    row_id,
                    client_id,
                    msg.columns,
                    hlc,
                    "d",
                    trusted=True,
                    cell=json_cell,
                    report=errors.append,
                )
        except (SchemaError, ValidationError) as exc:
            got = (type(exc), str(exc))
        return got, errors

    assert read(True) == read(False)
