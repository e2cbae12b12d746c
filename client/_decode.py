"""Fast decoding of deltas the client can trust: gateway replies and its own outbox.

The core decoders (:mod:`lakesync.wire`, :mod:`lakesync.wsframes`) recompute every deltaId,
which is right for a gateway receiving pushes but costs more than half of a client's initial
sync. The gateway verified each deltaId when it stored the delta, and the outbox holds deltas
this client built, so here only what keeps the replica safe is checked: the op, the table and
column identifiers (they become SQL identifiers), the row id and the HLC.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec
from google.protobuf.message import DecodeError as ProtoDecodeError

from client.errors import ValidationError
from lakesync import hlc as _hlc
from lakesync.delta import ColumnValue, Op, RowDelta, WireDelta, validate_identifier
from lakesync.proto import lakesync_pb2 as pb
from lakesync.wire import PullResponse

__all__ = [
    "decode_outbox",
    "decode_pull_reply",
    "decode_push_reply",
    "decode_sync_response",
    "encode_outbox",
]

_OPS: dict[str, Op] = {"INSERT": "INSERT", "UPDATE": "UPDATE", "DELETE": "DELETE"}
_PB_OPS: dict[int, Op] = {pb.INSERT: "INSERT", pb.UPDATE: "UPDATE", pb.DELETE: "DELETE"}
_pull_decoder = msgspec.json.Decoder(PullResponse)
_wire_decoder = msgspec.json.Decoder(WireDelta)
_wire_encoder = msgspec.json.Encoder()
_value_decoder = msgspec.json.Decoder()


def _delta(
    op: Op | None,
    table: str,
    row_id: str,
    client_id: str,
    columns: Iterable[tuple[str, Any]],
    hlc: int,
    delta_id: str,
) -> RowDelta:
    if op is None:
        raise ValidationError("delta op must be INSERT, UPDATE or DELETE")
    validate_identifier(table, "delta table")
    if not row_id or not client_id:
        raise ValidationError("delta rowId and clientId must be non-empty")
    cols = tuple(ColumnValue(validate_identifier(c, "delta column"), v) for c, v in columns)
    return RowDelta(op, table, row_id, client_id, cols, hlc, delta_id)


def _from_wire(w: WireDelta) -> RowDelta:
    return _delta(
        _OPS.get(w.op),
        w.table,
        w.row_id,
        w.client_id,
        ((c.column, c.value) for c in w.columns),
        _hlc.parse(w.hlc),
        w.delta_id,
    )


def decode_pull_reply(body: bytes) -> tuple[list[RowDelta], int, bool]:
    """A ``/pull`` JSON reply as ``(deltas, server_hlc, has_more)``."""
    try:
        resp = _pull_decoder.decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ValidationError(f"invalid pull response: {exc}") from None
    return [_from_wire(w) for w in resp.deltas], _hlc.parse(resp.server_hlc), resp.has_more


def _json_value(raw: bytes) -> Any:
    return _value_decoder.decode(raw) if raw else None


class _PushAck(msgspec.Struct, rename="camel"):
    server_hlc: str
    accepted: int


_push_ack_decoder = msgspec.json.Decoder(_PushAck)


def decode_push_reply(body: bytes) -> tuple[int, int]:
    """A ``/push`` JSON reply as ``(server_hlc, accepted)``; its echoed deltas are skipped."""
    try:
        ack = _push_ack_decoder.decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ValidationError(f"invalid push response: {exc}") from None
    return _hlc.parse(ack.server_hlc), ack.accepted


def decode_sync_response(body: bytes) -> tuple[list[RowDelta], int, bool]:
    """An untagged protobuf SyncResponse (WebSocket reply or broadcast, checkpoint frame)."""
    try:
        resp = pb.SyncResponse.FromString(body)
        deltas = [
            _delta(
                _PB_OPS.get(m.op),
                m.table,
                m.row_id,
                m.client_id,
                (
                    (c.column, _value_decoder.decode(c.value) if c.value else None)
                    for c in m.columns
                ),
                m.hlc,
                m.delta_id,
            )
            for m in resp.deltas
        ]
    except (msgspec.DecodeError, ProtoDecodeError) as exc:
        raise ValidationError(f"malformed SyncResponse: {exc}") from None
    return deltas, resp.server_hlc, resp.has_more


def encode_outbox(delta: RowDelta) -> bytes:
    """The outbox form of a local delta (its SPEC wire JSON)."""
    return _wire_encoder.encode(delta.to_wire_struct())


def decode_outbox(body: bytes) -> RowDelta:
    """A delta written by :func:`encode_outbox`."""
    return _from_wire(_wire_decoder.decode(body))
