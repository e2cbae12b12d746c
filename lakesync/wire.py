"""The delta codec of the HTTP API (docs/protocol.md §1, §3, §5): its JSON bodies as msgspec
Structs with their decoders built once, and every delta read through
:func:`lakesync.delta.read_delta`.

A gateway reads pushes **verified** (every deltaId recomputed); a client reads its gateway's
replies and its own outbox **trusted** (no deltaId recomputed; a value no replica can hold reads
null and is reported). The protobuf frames of the WebSocket (:mod:`lakesync.wsframes`) read
their deltas the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from lakesync import hlc as _hlc
from lakesync.delta import CellErrorHandler, Op, RowDelta, WireDelta, read_delta
from lakesync.errors import ValidationError
from lakesync.values import normalize_value

__all__ = [
    "FEATURES_HEADER",
    "VIEW_EVICTIONS_FEATURE",
    "ErrorBody",
    "PullResponse",
    "PushRequest",
    "PushResponse",
    "decode_delta",
    "decode_json_object",
    "decode_pull_response",
    "decode_push_request",
    "decode_push_response",
    "encode_delta",
    "encode_push",
    "json_cell",
    "knows_view_evictions",
    "pull_response",
    "push_deltas",
    "push_response",
]


FEATURES_HEADER = "X-LakeSync-Features"
"""The request header (pull, checkpoint, WebSocket handshake) where a client lists, comma
separated, the protocol extensions it understands. A LakeSync v1 client sends none."""

VIEW_EVICTIONS_FEATURE = "view-evictions"
"""The client forgets a row on a view eviction and merges the row's real clocks sent after it
(the Python client, :mod:`lakesync.views`). A client that does not say so gets whole rows it can
apply with whole-row last-writer-wins (:func:`lakesync.views.whole_row_snapshot`)."""


def knows_view_evictions(features: str | None) -> bool:
    """Whether a :data:`FEATURES_HEADER` value lists :data:`VIEW_EVICTIONS_FEATURE`."""
    if not features:
        return False
    return VIEW_EVICTIONS_FEATURE in {f.strip().lower() for f in features.split(",")}


class PushRequest(msgspec.Struct, rename="camel"):
    """``POST /v1/sync/{gw}/push`` body."""

    client_id: str
    deltas: list[WireDelta]
    last_seen_hlc: str | int | None = None


class PushResponse(msgspec.Struct, rename="camel"):
    """Reply to a push: the server's ingest HLC after the batch, and the newly stored deltas."""

    server_hlc: str
    accepted: int
    deltas: list[WireDelta]


class PullResponse(msgspec.Struct, rename="camel"):
    """Reply to a pull: a page of deltas and the cursor to pass as ``since`` next time."""

    deltas: list[WireDelta]
    server_hlc: str
    has_more: bool


class ErrorBody(msgspec.Struct, omit_defaults=True):
    """Every error reply: ``{"error": message, "code": CODE}``, plus the gateway's
    ``requestId`` (its ``X-Request-Id``; an addition to docs/protocol.md §5), under which its
    log holds whatever the short message leaves out."""

    error: str
    code: str
    request_id: str | None = msgspec.field(default=None, name="requestId")


class _PushAck(msgspec.Struct, rename="camel"):
    """A push reply without its echoed deltas (a client has them already)."""

    server_hlc: str
    accepted: int


class _RawColumn(msgspec.Struct):
    column: str
    value: msgspec.Raw = msgspec.Raw(b"null")


class _RawDelta(msgspec.Struct, rename="camel"):
    op: Op
    table: str
    row_id: str
    client_id: str
    columns: list[_RawColumn]
    hlc: str | int
    delta_id: str


class _RawPullResponse(msgspec.Struct, rename="camel"):
    """A pull reply with each column value left undecoded, to read the cells one by one."""

    deltas: list[_RawDelta]
    server_hlc: str
    has_more: bool


_push_decoder = msgspec.json.Decoder(PushRequest)
_push_ack_decoder = msgspec.json.Decoder(_PushAck)
_pull_decoder = msgspec.json.Decoder(PullResponse)
_raw_pull_decoder = msgspec.json.Decoder(_RawPullResponse)
_delta_decoder = msgspec.json.Decoder(WireDelta)
_value_decoder = msgspec.json.Decoder()
_object_decoder = msgspec.json.Decoder(dict[str, Any])
_encoder = msgspec.json.Encoder()


def json_cell(raw: bytes) -> Any:
    """A cell sent as its UTF-8 JSON (a protobuf ColumnDelta, a raw pull value) as a replica
    holds it; empty bytes are null (protobuf omits a default value)."""
    return normalize_value(_value_decoder.decode(raw)) if raw else None


def _read_wire(
    w: WireDelta,
    trusted: bool,
    report: CellErrorHandler | None = None,
    where: str = "delta",
    cell: Callable[[Any], Any] | None = normalize_value,
) -> RowDelta:
    return read_delta(
        w.op,
        w.table,
        w.row_id,
        w.client_id,
        w.columns,
        w.hlc,
        w.delta_id,
        trusted=trusted,
        cell=cell,
        report=report,
        where=where,
    )


def _to_wire(delta: RowDelta) -> WireDelta:
    return WireDelta(
        delta.op,
        delta.table,
        delta.row_id,
        delta.client_id,
        delta.columns,
        str(delta.hlc),
        delta.delta_id,
    )


def _decode(decoder: msgspec.json.Decoder[Any], body: bytes, what: str) -> Any:
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise ValidationError(f"invalid {what}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ValidationError(f"{what} is not valid JSON: {exc}") from None


def decode_json_object(body: bytes, what: str) -> dict[str, Any]:
    """A body that must be one JSON object (an admin document); else :class:`ValidationError`."""
    obj: dict[str, Any] = _decode(_object_decoder, body, what)
    return obj


# -- push (client → gateway) ------------------------------------------------------------------
def encode_push(client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int | None) -> bytes:
    """A push body."""
    last = None if last_seen_hlc is None else str(last_seen_hlc)
    return _encoder.encode(PushRequest(client_id, [_to_wire(d) for d in deltas], last))


def decode_push_request(body: bytes) -> PushRequest:
    """A push body's JSON, typed; a :class:`ValidationError` names the JSON path of a problem."""
    req: PushRequest = _decode(_push_decoder, body, "push body")
    return req


def push_deltas(req: PushRequest) -> tuple[list[RowDelta], int | None]:
    """A push's deltas, each verified, and its ``lastSeenHlc`` (None when absent)."""
    last = None if req.last_seen_hlc is None else _hlc.parse(req.last_seen_hlc, "lastSeenHlc")
    deltas = [_read_wire(w, False, where=f"deltas[{i}]") for i, w in enumerate(req.deltas)]
    return deltas, last


def push_response(server_hlc: int, accepted: int, stored: Sequence[RowDelta]) -> PushResponse:
    """A push reply: the ingest HLC after the batch, how many deltas count as accepted, and
    the newly stored ones."""
    return PushResponse(str(server_hlc), accepted, [_to_wire(d) for d in stored])


def decode_push_response(body: bytes) -> tuple[int, int]:
    """A push reply as ``(server_hlc, accepted)``; its echoed deltas are skipped."""
    ack: _PushAck = _decode(_push_ack_decoder, body, "push response")
    return _hlc.parse(ack.server_hlc, "serverHlc"), ack.accepted


# -- pull (gateway → client) ------------------------------------------------------------------
def pull_response(deltas: Sequence[RowDelta], server_hlc: int, has_more: bool) -> PullResponse:
    """A pull reply."""
    return PullResponse([_to_wire(d) for d in deltas], str(server_hlc), has_more)


def decode_pull_response(
    body: bytes, report: CellErrorHandler | None = None
) -> tuple[list[RowDelta], int, bool]:
    """A pull reply, trusted, as ``(deltas, server_hlc, has_more)``; cells no replica can hold
    read null and go to ``report``."""
    try:
        resp = _pull_decoder.decode(body)
    except (msgspec.DecodeError, RecursionError):
        # A value msgspec cannot read (1e400, deep nesting): read the page cell by cell instead.
        try:
            raw = _raw_pull_decoder.decode(body)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError) as exc:
            raise ValidationError(f"invalid pull response: {exc}") from None
        deltas = [
            read_delta(
                w.op,
                w.table,
                w.row_id,
                w.client_id,
                w.columns,
                w.hlc,
                w.delta_id,
                trusted=True,
                cell=json_cell,
                report=report,
            )
            for w in raw.deltas
        ]
        return deltas, _hlc.parse(raw.server_hlc, "serverHlc"), raw.has_more
    except msgspec.ValidationError as exc:
        raise ValidationError(f"invalid pull response: {exc}") from None
    deltas = [_read_wire(w, True, report) for w in resp.deltas]
    return deltas, _hlc.parse(resp.server_hlc, "serverHlc"), resp.has_more


# -- one delta (a client's outbox) ------------------------------------------------------------
def encode_delta(delta: RowDelta) -> bytes:
    """A delta's docs/protocol.md §3 JSON."""
    return _encoder.encode(_to_wire(delta))


def decode_delta(body: bytes) -> RowDelta:
    """A delta written by :func:`encode_delta` (a client's outbox), trusted, its values as they
    are: its writer built it with :meth:`RowDelta.create`, which normalised them."""
    w: WireDelta = _decode(_delta_decoder, body, "delta")
    return _read_wire(w, True, cell=None)
