"""JSON bodies of the HTTP API (SPEC §5) as msgspec Structs, with encoders/decoders built once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from lakesync import hlc as _hlc
from lakesync.delta import RowDelta, WireDelta
from lakesync.errors import ValidationError

__all__ = [
    "ErrorBody",
    "PullResponse",
    "PushRequest",
    "PushResponse",
    "decode_pull_response",
    "decode_push",
    "decode_push_response",
    "encode",
    "encode_pull_response",
    "encode_push",
    "encode_push_response",
]


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


class ErrorBody(msgspec.Struct):
    """Every error reply: ``{"error": message, "code": CODE}``."""

    error: str
    code: str


_push_decoder = msgspec.json.Decoder(PushRequest)
_push_response_decoder = msgspec.json.Decoder(PushResponse)
_pull_response_decoder = msgspec.json.Decoder(PullResponse)
_encoder = msgspec.json.Encoder()


def encode(obj: Any) -> bytes:
    """Encode any wire Struct (or JSON-ready builtins) to JSON bytes."""
    return _encoder.encode(obj)


def _decode(decoder: msgspec.json.Decoder[Any], body: bytes, what: str) -> Any:
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise ValidationError(f"invalid {what}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ValidationError(f"{what} is not valid JSON: {exc}") from None


def _deltas(wires: Sequence[WireDelta]) -> list[RowDelta]:
    return [RowDelta.from_wire_struct(w, f"deltas[{i}]") for i, w in enumerate(wires)]


def decode_push(body: bytes) -> tuple[str, list[RowDelta], int | None]:
    """Decode and validate a push body into ``(client_id, deltas, last_seen_hlc)``."""
    req: PushRequest = _decode(_push_decoder, body, "push body")
    last = None if req.last_seen_hlc is None else _hlc.parse(req.last_seen_hlc, "lastSeenHlc")
    return req.client_id, _deltas(req.deltas), last


def encode_push(client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int | None) -> bytes:
    """Encode a push body."""
    last = None if last_seen_hlc is None else str(last_seen_hlc)
    return _encoder.encode(PushRequest(client_id, [d.to_wire_struct() for d in deltas], last))


def encode_push_response(server_hlc: int, accepted: int, deltas: Sequence[RowDelta]) -> bytes:
    """Encode a push reply."""
    return _encoder.encode(
        PushResponse(str(server_hlc), accepted, [d.to_wire_struct() for d in deltas])
    )


def decode_push_response(body: bytes) -> tuple[int, int, list[RowDelta]]:
    """Decode a push reply into ``(server_hlc, accepted, deltas)``."""
    resp: PushResponse = _decode(_push_response_decoder, body, "push response")
    return _hlc.parse(resp.server_hlc, "serverHlc"), resp.accepted, _deltas(resp.deltas)


def encode_pull_response(deltas: Sequence[RowDelta], server_hlc: int, has_more: bool) -> bytes:
    """Encode a pull reply."""
    return _encoder.encode(
        PullResponse([d.to_wire_struct() for d in deltas], str(server_hlc), has_more)
    )


def decode_pull_response(body: bytes) -> tuple[list[RowDelta], int, bool]:
    """Decode and validate a pull reply into ``(deltas, server_hlc, has_more)``."""
    resp: PullResponse = _decode(_pull_response_decoder, body, "pull response")
    return _deltas(resp.deltas), _hlc.parse(resp.server_hlc, "serverHlc"), resp.has_more
