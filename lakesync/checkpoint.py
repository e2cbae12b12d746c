"""Checkpoints: a gateway's merged rows as of an ingest position, for initial syncs (pure).

A checkpoint of a gateway is every row it holds (live or deleted) with its merged state and
real clocks (:class:`~lakesync.merge.RowState`) and the ingest HLC of its last delta, as of a
*position*: every delta of the gateway ingested at or before it is merged in (a few later ones
may be too, which is harmless: merging is idempotent, and the client pulls from the position
afterwards). It is stored in *chunks* of about a byte budget each, so a gateway serves any size
with bounded memory: it reads, filters and sends one chunk at a time.

Serving (``GET /v1/sync/{gw}/checkpoint``, SPEC §5) turns each chunk into one frame
``[uint32 big-endian length][SyncResponse]`` of what the requesting client may see, decided at
serve time by the pure view logic of :mod:`lakesync.views`:

- a gateway that never had sync rules sends every row's real state at its real clocks
  (:func:`~lakesync.views.row_state_deltas`): its tombstone if it has one, then its cells. Deleted
  rows are sent as their tombstone, so a late delta the client pulls afterwards cannot revive
  them (a full pull would have delivered the DELETE too);
- under rules each row is a row snapshot for a fresh reader
  (:func:`~lakesync.views.resync_view`): only rows the client sees, plus evictions of rows it
  wrote itself and cannot see. Every later pull delivers row snapshots too.

A client applies the frames, then pulls from the position: its replica is then the one a full
pull gives. The position is also the ``X-Checkpoint-Hlc`` header and each frame's
``server_hlc``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import msgspec

from lakesync.delta import RowDelta
from lakesync.merge import RowState
from lakesync.views import Reader, RowKey, RowRecord, SnapshotCache, resync_view, row_state_deltas
from lakesync.wsframes import encode_response

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_CHUNK_BYTES",
    "checkpoint_deltas",
    "chunk_rows",
    "decode_chunk",
    "encode_frame",
]

CONTENT_TYPE = "application/x-lakesync-checkpoint-stream"
"""The media type of a checkpoint stream (SPEC §5)."""

DEFAULT_CHUNK_BYTES = 256 * 1024
"""Stored bytes per chunk: what one serving step holds (decoded, a few times that)."""

_encoder = msgspec.json.Encoder()
_row_decoder = msgspec.json.Decoder(list[tuple[str, str, str, dict[str, Any]]])


def _encode_row(key: RowKey, rec: RowRecord) -> bytes:
    return _encoder.encode((key[0], key[1], str(rec.last_ingest), rec.state.to_dict()))


def chunk_rows(
    rows: Iterable[tuple[RowKey, RowRecord]], budget: int = DEFAULT_CHUNK_BYTES
) -> Iterator[tuple[bytes, int]]:
    """Stored chunks of ``rows``: ``(body, rows in it)``, each body about ``budget`` bytes (a
    chunk closes once it reaches the budget; a single larger row makes a chunk alone)."""
    if budget <= 0:
        raise ValueError("a chunk budget must be positive")
    parts: list[bytes] = []
    size = 0
    for key, rec in rows:
        part = _encode_row(key, rec)
        parts.append(part)
        size += len(part) + 1
        if size >= budget:
            yield b"[" + b",".join(parts) + b"]", len(parts)
            parts, size = [], 0
    if parts:
        yield b"[" + b",".join(parts) + b"]", len(parts)


def decode_chunk(body: bytes) -> dict[RowKey, RowRecord]:
    """The rows of a chunk written by :func:`chunk_rows`, in their stored order."""
    return {
        (t, r): RowRecord(RowState.from_dict(state), int(last))
        for t, r, last, state in _row_decoder.decode(body)
    }


def checkpoint_deltas(
    rows: Mapping[RowKey, RowRecord],
    reader: Reader,
    raw: bool,
    cache: SnapshotCache | None = None,
) -> list[RowDelta]:
    """What a client receives for one chunk's rows (see the module docstring): ``raw`` when the
    gateway never had sync rules; ``reader`` is the client's read from 0."""
    if raw:
        out: list[RowDelta] = []
        for (table, row_id), rec in rows.items():
            out.extend(row_state_deltas(table, row_id, rec.state, rec.state.live))
        return out
    if reader.since != 0:
        raise ValueError("a checkpoint is read from 0")
    return resync_view(rows, reader, cache)


def encode_frame(deltas: Sequence[RowDelta], position: int) -> bytes:
    """One frame of a checkpoint stream: ``[uint32 big-endian length][SyncResponse]``."""
    body = encode_response(deltas, position, False)
    return len(body).to_bytes(4, "big") + body
