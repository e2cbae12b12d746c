"""WebSocket frames (SPEC §9): a tag byte plus a protobuf message, pure encode/decode.

Client → server frames are ``0x01`` + SyncPush or ``0x02`` + SyncPull. The server replies with
an untagged SyncResponse and broadcasts ``0x03`` + SyncResponse. The two are told apart by the
first byte: a SyncResponse never starts with ``0x03`` (that would be field 0, an invalid tag).
Column values travel as the UTF-8 JSON of the value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from google.protobuf.message import DecodeError

from lakesync.canonical import canonical_json
from lakesync.delta import RowDelta, WireColumn, WireDelta
from lakesync.errors import ValidationError
from lakesync.proto import lakesync_pb2 as pb

__all__ = [
    "TAG_BROADCAST",
    "TAG_PULL",
    "TAG_PUSH",
    "ServerFrame",
    "SyncPullMsg",
    "SyncPushMsg",
    "decode_client_frame",
    "decode_response",
    "decode_server_frame",
    "delta_from_proto",
    "delta_to_proto",
    "encode_pull",
    "encode_push",
    "encode_response",
]

TAG_PUSH = 0x01
TAG_PULL = 0x02
TAG_BROADCAST = 0x03

_OP_TO_PB = {"INSERT": pb.INSERT, "UPDATE": pb.UPDATE, "DELETE": pb.DELETE}
_PB_TO_OP = {v: k for k, v in _OP_TO_PB.items()}


@dataclass(frozen=True, slots=True)
class SyncPushMsg:
    """A decoded push frame."""

    client_id: str
    deltas: list[RowDelta]
    last_seen_hlc: int


@dataclass(frozen=True, slots=True)
class SyncPullMsg:
    """A decoded pull frame."""

    client_id: str
    since_hlc: int
    max_deltas: int


@dataclass(frozen=True, slots=True)
class ServerFrame:
    """A decoded server frame: a reply, or a broadcast of other clients' deltas."""

    broadcast: bool
    deltas: list[RowDelta]
    server_hlc: int
    has_more: bool


def delta_to_proto(delta: RowDelta) -> pb.RowDelta:
    """Convert a RowDelta to its protobuf message."""
    return pb.RowDelta(
        op=_OP_TO_PB[delta.op],
        table=delta.table,
        row_id=delta.row_id,
        columns=[
            pb.ColumnDelta(column=c.column, value=canonical_json(c.value).encode())
            for c in delta.columns
        ],
        hlc=delta.hlc,
        client_id=delta.client_id,
        delta_id=delta.delta_id,
    )


def _json_value(raw: bytes, where: str) -> Any:
    # msgspec, like the HTTP bodies: no NaN/Infinity, no out-of-range numbers, no lone
    # surrogates (none of which a JSON replica or a UTF-8 store can hold).
    try:
        return msgspec.json.decode(raw) if raw else None
    except msgspec.DecodeError as exc:
        raise ValidationError(f"{where}: column value is not valid UTF-8 JSON ({exc})") from None


def delta_from_proto(msg: pb.RowDelta, where: str = "delta") -> RowDelta:
    """Validate a protobuf RowDelta (identifiers, deltaId) into a RowDelta."""
    op = _PB_TO_OP.get(msg.op)
    if op is None:
        raise ValidationError(f"{where}.op must be INSERT, UPDATE or DELETE")
    wire = WireDelta(
        op,
        msg.table,
        msg.row_id,
        msg.client_id,
        [WireColumn(c.column, _json_value(c.value, where)) for c in msg.columns],
        msg.hlc,
        msg.delta_id,
    )
    return RowDelta.from_wire_struct(wire, where)


def _deltas(msgs: Sequence[pb.RowDelta]) -> list[RowDelta]:
    return [delta_from_proto(m, f"deltas[{i}]") for i, m in enumerate(msgs)]


def encode_push(client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int = 0) -> bytes:
    """A ``0x01`` SyncPush frame."""
    msg = pb.SyncPush(
        client_id=client_id,
        deltas=[delta_to_proto(d) for d in deltas],
        last_seen_hlc=last_seen_hlc,
    )
    return bytes([TAG_PUSH]) + msg.SerializeToString()


def encode_pull(client_id: str, since_hlc: int, max_deltas: int) -> bytes:
    """A ``0x02`` SyncPull frame."""
    msg = pb.SyncPull(client_id=client_id, since_hlc=since_hlc, max_deltas=max_deltas)
    return bytes([TAG_PULL]) + msg.SerializeToString()


def decode_client_frame(frame: bytes) -> SyncPushMsg | SyncPullMsg:
    """Decode a client frame; :class:`ValidationError` for an unknown tag or a bad body."""
    if not frame:
        raise ValidationError("empty WebSocket frame")
    tag, body = frame[0], frame[1:]
    try:
        if tag == TAG_PUSH:
            push = pb.SyncPush.FromString(body)
            return SyncPushMsg(push.client_id, _deltas(push.deltas), push.last_seen_hlc)
        if tag == TAG_PULL:
            pull = pb.SyncPull.FromString(body)
            return SyncPullMsg(pull.client_id, pull.since_hlc, pull.max_deltas)
    except DecodeError as exc:
        raise ValidationError(f"malformed protobuf in WebSocket frame: {exc}") from None
    raise ValidationError(f"unknown WebSocket frame tag 0x{tag:02x}; expected 0x01 or 0x02")


def encode_response(
    deltas: Sequence[RowDelta], server_hlc: int, has_more: bool, broadcast: bool = False
) -> bytes:
    """A SyncResponse: untagged as a reply, ``0x03``-tagged as a broadcast."""
    body = pb.SyncResponse(
        deltas=[delta_to_proto(d) for d in deltas], server_hlc=server_hlc, has_more=has_more
    ).SerializeToString()
    return bytes([TAG_BROADCAST]) + body if broadcast else body


def decode_response(body: bytes) -> tuple[list[RowDelta], int, bool]:
    """Decode an untagged SyncResponse (also the checkpoint stream's frames)."""
    try:
        resp = pb.SyncResponse.FromString(body)
    except DecodeError as exc:
        raise ValidationError(f"malformed SyncResponse: {exc}") from None
    return _deltas(resp.deltas), resp.server_hlc, resp.has_more


def decode_server_frame(frame: bytes) -> ServerFrame:
    """Decode a server frame into a :class:`ServerFrame`."""
    broadcast = bool(frame) and frame[0] == TAG_BROADCAST
    deltas, server_hlc, has_more = decode_response(frame[1:] if broadcast else frame)
    return ServerFrame(broadcast, deltas, server_hlc, has_more)
