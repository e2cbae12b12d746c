"""Checkpoints: a gateway's merged rows as of an ingest position, for initial syncs (pure).

A checkpoint of a gateway is every row it holds (live or deleted) with its merged state and
real clocks (:class:`~lakesync.merge.RowState`) and the ingest HLC of its last delta, as of a
*position*: every delta of the gateway ingested at or before it is merged in (a few later ones
may be too, which is harmless: merging is idempotent, and the client pulls from the position
afterwards). It is stored in *chunks* of about a byte budget each, so a gateway serves any size
with bounded memory: it reads, filters and sends one chunk at a time.

Serving (``GET /v1/sync/{gw}/checkpoint``, docs/protocol.md §5) turns each chunk into one frame
``[uint32 big-endian length][SyncResponse]`` of what the requesting client may see, decided at
serve time by the pure view logic of :mod:`lakesync.views`:

- a gateway that never had sync rules sends every row's real state at its real clocks
  (:func:`~lakesync.views.row_state_deltas`): its tombstone if it has one, then its cells. Deleted
  rows are sent as their tombstone, so a late delta the client pulls afterwards cannot revive
  them (a full pull would have delivered the DELETE too);
- under rules each row is a row snapshot for a fresh reader
  (:func:`~lakesync.views.resync_view`): only rows the client sees, plus evictions of rows it
  wrote itself and cannot see (the store remembers who wrote what after the hot log is
  trimmed). A row the client sees comes without the snapshot's eviction: what a replica holds
  of it before a checkpoint (nothing, or older real states when it resyncs) is merged into the
  row's state by its real state alone. Every later pull delivers row snapshots too; a client
  without view evictions gets whole-row snapshots
  (:func:`~lakesync.views.whole_row_snapshot`), as its pulls do.

A client applies the frames, then pulls from the position: its replica is then the one a full
pull gives. The position is also the ``X-Checkpoint-Hlc`` header and each frame's
``server_hlc``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any

import msgspec

from lakesync.delta import VIEW_EVICTION_CLIENT, RowDelta
from lakesync.proto import lakesync_pb2 as pb
from lakesync.rules import visible_among
from lakesync.views import Reader, RowKey, RowRecord, row_state_deltas, whole_row_snapshot
from lakesync.wsframes import delta_to_proto

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_CHUNK_BYTES",
    "chunk_rows",
    "serve_chunk",
]

CONTENT_TYPE = "application/x-lakesync-checkpoint-stream"
"""The media type of a checkpoint stream (docs/protocol.md §5)."""

DEFAULT_CHUNK_BYTES = 256 * 1024
"""Stored bytes per chunk: what one serving step holds (decoded, a few times that)."""

_Row = tuple[str, str, int, dict[str, Any] | None, bool, bytes]
"""A stored row: table, row_id, last ingest HLC, its visible columns (None when deleted), whether
it is live, and its real state's deltas as encoded ``SyncResponse.deltas`` fields."""

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(list[_Row])
# Serving a gateway without rules sends each row's encoded state as it is: the other fields
# are left undecoded (no dicts of values built only to be dropped).
_Skip = msgspec.Raw
_real_decoder = msgspec.msgpack.Decoder(list[tuple[_Skip, _Skip, _Skip, _Skip, _Skip, bytes]])


def _fields(deltas: Sequence[RowDelta]) -> bytes:
    """Deltas as encoded ``SyncResponse.deltas`` fields (a frame is their concatenation)."""
    return pb.SyncResponse(deltas=[delta_to_proto(d) for d in deltas]).SerializeToString()


def _eviction(table: str, row_id: str, base: int) -> bytes:
    """A view eviction at ``base`` as an encoded ``SyncResponse.deltas`` field."""
    return _fields([RowDelta.of_stored("DELETE", table, row_id, VIEW_EVICTION_CLIENT, {}, base)])


def _stored(key: RowKey, rec: RowRecord) -> _Row:
    state = rec.state
    # The real state is encoded once, when the checkpoint is built; serving only picks rows.
    real = _fields(row_state_deltas(key[0], key[1], state, state.live))
    return (key[0], key[1], rec.last_ingest, state.visible(), state.live, real)


def chunk_rows(
    rows: Iterable[tuple[RowKey, RowRecord]], budget: int = DEFAULT_CHUNK_BYTES
) -> Iterator[tuple[bytes, int]]:
    """Stored chunks of ``rows``: ``(body, rows in it)``, each body about ``budget`` bytes (a
    chunk closes once it reaches the budget; a single larger row makes a chunk alone)."""
    if budget <= 0:
        raise ValueError("a chunk budget must be positive")
    part: list[_Row] = []
    size = 0
    for key, rec in rows:
        row = _stored(key, rec)
        part.append(row)
        size += len(row[5]) + 64 + 32 * len(row[3] or ())
        if size >= budget:
            yield _encoder.encode(part), len(part)
            part, size = [], 0
    if part:
        yield _encoder.encode(part), len(part)


def serve_chunk(
    body: bytes,
    reader: Reader,
    raw: bool,
    position: int,
    written_among: Callable[[list[RowKey]], Collection[RowKey]] | None = None,
) -> bytes | None:
    """The frame a client receives for one stored chunk (None when it receives nothing of it):
    ``raw`` (the gateway never had sync rules) sends every row's real state; otherwise each row
    is what :func:`lakesync.views.resync_view` gives a fresh ``reader`` less the evictions of
    the rows it sees: a row it sees as its real state, a row it wrote and cannot see as its
    eviction at ``max(last ingest, reader.stamp)`` (and its tombstone if deleted), any other
    row not at all; a ``reader.whole_rows`` client gets whole-row snapshots (evictions
    included: it keeps the HLCs it applied). The rows it wrote are
    ``reader.written`` plus, when given, what ``written_among`` answers for the chunk's rows it
    cannot see (one look-up per chunk, the chunk decoded once)."""
    if raw:
        parts = [real for *_, real in _real_decoder.decode(body)]
    else:
        if reader.since != 0:
            raise ValueError("a checkpoint is read from 0")
        rows = _decoder.decode(body)
        shown = visible_among(reader.rules, reader.claims, [(row[0], row[3]) for row in rows])
        written: Collection[RowKey] = reader.written
        if written_among is not None:
            hidden = [(row[0], row[1]) for row, s in zip(rows, shown, strict=True) if not s]
            if hidden:
                written = set(written_among(hidden)) | reader.written
        parts = []
        for (table, row_id, last_ingest, values, live, real), seen in zip(rows, shown, strict=True):
            if not seen and (table, row_id) not in written:
                continue
            base = max(last_ingest, reader.stamp)
            if reader.whole_rows:
                parts.append(
                    _fields(whole_row_snapshot(table, row_id, values if seen else None, base))
                )
                continue
            if seen:
                # The replica holds nothing of the row, or real states of it from the same
                # history (a resync, a broadcast): merging the real state in gives the later
                # state either way, so an eviction first would only double what is sent.
                parts.append(real)
                continue
            parts.append(_eviction(table, row_id, base))
            if not live:
                parts.append(real)
    if not any(parts):
        return None
    body_out = b"".join(parts) + pb.SyncResponse(server_hlc=position).SerializeToString()
    return len(body_out).to_bytes(4, "big") + body_out
