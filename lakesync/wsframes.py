"""WebSocket frames (docs/protocol.md §9): a tag byte plus a protobuf message, pure encode/decode.

Client → server frames are ``0x01`` + SyncPush or ``0x02`` + SyncPull. The server replies with
an untagged SyncResponse and broadcasts ``0x03`` + SyncResponse. The two are told apart by the
first byte: a SyncResponse never starts with ``0x03`` (that would be field 0, an invalid tag).
A SyncResponse the gateway sends always carries its ``server_hlc`` field, zero included (proto3
leaves a zero out), so no reply is an empty frame: a client may take any reply of 9 bytes or
more as its answer, on a gateway that stores nothing yet too.
Column values travel as the UTF-8 JSON of the value. Deltas are read like JSON ones
(:func:`lakesync.delta.read_delta`): a gateway verifies the pushes it reads, a client trusts
its gateway's replies and broadcasts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from lakesync.canonical import canonical_json
from lakesync.delta import CellErrorHandler, RowDelta, read_delta, read_trusted_json_delta
from lakesync.errors import ValidationError
from lakesync.proto import lakesync_pb2 as pb
from lakesync.wire import json_cell

__all__ = [
    "CLOSE_TOO_SLOW",
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

CLOSE_TOO_SLOW = 4408
"""The close code of a receiver that did not take its broadcasts fast enough (its send queue
overflowed): the client reconnects and pulls from its cursor (docs/protocol.md §9)."""

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


def delta_from_proto(
    msg: pb.RowDelta,
    where: str = "delta",
    *,
    trusted: bool = False,
    report: CellErrorHandler | None = None,
) -> RowDelta:
    """Read a protobuf RowDelta, verified or trusted (:func:`lakesync.delta.read_delta`)."""
    op = _PB_TO_OP.get(msg.op, str(msg.op))
    table, row_id, client_id, columns = msg.table, msg.row_id, msg.client_id, msg.columns
    hlc, did = msg.hlc, msg.delta_id
    if trusted:  # a gateway's reply: its common case is read inline
        fast = read_trusted_json_delta(op, table, row_id, client_id, columns, hlc, did)
        if fast is not None:
            return fast
    return read_delta(
        op,
        table,
        row_id,
        client_id,
        columns,
        hlc,
        did,
        trusted=trusted,
        cell=json_cell,
        report=report,
        where=where,
    )


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
            deltas = [delta_from_proto(m, f"deltas[{i}]") for i, m in enumerate(push.deltas)]
            return SyncPushMsg(push.client_id, deltas, push.last_seen_hlc)
        if tag == TAG_PULL:
            pull = pb.SyncPull.FromString(body)
            return SyncPullMsg(pull.client_id, pull.since_hlc, pull.max_deltas)
    except DecodeError as exc:
        raise ValidationError(f"malformed protobuf in WebSocket frame: {exc}") from None
    raise ValidationError(f"unknown WebSocket frame tag 0x{tag:02x}; expected 0x01 or 0x02")


_ZERO_SERVER_HLC = b"\x11" + bytes(8)
"""``server_hlc`` (field 2, fixed64) written out at 0, which proto3 would leave out."""


def encode_response(
    deltas: Sequence[RowDelta], server_hlc: int, has_more: bool, broadcast: bool = False
) -> bytes:
    """A SyncResponse: untagged as a reply, ``0x03``-tagged as a broadcast. It always holds
    its ``server_hlc`` field, so it is never empty: an empty gateway's reply (no deltas,
    ``server_hlc`` 0) would otherwise be a zero-byte frame, which clients take for no answer."""
    body = pb.SyncResponse(
        deltas=[delta_to_proto(d) for d in deltas], server_hlc=server_hlc, has_more=has_more
    ).SerializeToString()
    if server_hlc == 0:
        body += _ZERO_SERVER_HLC
    return bytes([TAG_BROADCAST]) + body if broadcast else body


def decode_response(
    body: bytes, report: CellErrorHandler | None = None
) -> tuple[list[RowDelta], int, bool]:
    """An untagged SyncResponse from a gateway (a reply, a checkpoint stream's frame), trusted:
    cells no replica can hold read null and go to ``report``."""
    try:
        resp = pb.SyncResponse.FromString(body)
    except DecodeError as exc:
        raise ValidationError(f"malformed SyncResponse: {exc}") from None
    deltas = [delta_from_proto(m, trusted=True, report=report) for m in resp.deltas]
    return deltas, resp.server_hlc, resp.has_more


def decode_server_frame(frame: bytes, report: CellErrorHandler | None = None) -> ServerFrame:
    """A server frame (a reply or a ``0x03`` broadcast), trusted like :func:`decode_response`."""
    broadcast = bool(frame) and frame[0] == TAG_BROADCAST
    deltas, server_hlc, has_more = decode_response(frame[1:] if broadcast else frame, report)
    return ServerFrame(broadcast, deltas, server_hlc, has_more)
