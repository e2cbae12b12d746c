"""Serving checkpoints and guarding pulls against the trimmed hot log.

A checkpoint (:mod:`lakesync.checkpoint_chunks`) is read from the store one chunk at a time,
filtered for the requesting client and encoded as one frame in a worker thread, and handed to
the response as it goes: the gateway holds one chunk per stream whatever the checkpoint's size.

Trimming (:meth:`lakesync.hotlog.base.HotLog.trim_log`) deletes a gateway's oldest log entries once
they are in the landing table and its checkpoint. A pull from a cursor older than the gateway's
horizon is refused with :class:`~lakesync.errors.CursorExpiredError` (``CURSOR_EXPIRED``): the
horizon is read *after* the page, and trimming moves it in the transaction that deletes, so a
page that may lack trimmed entries is never served.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import anyio.to_thread

from lakesync.api.services.sync import PullResult, SyncService
from lakesync.checkpoint_chunks import serve_chunk
from lakesync.errors import CursorExpiredError, NotFoundError
from lakesync.views import Reader, RowKey, ViewHistory, claims_hash, effective_rules

__all__ = ["CheckpointStream", "check_cursor", "open_checkpoint"]


WRITTEN_AT_ONCE = 10_000
"""Up to this many log entries (and trimmed rows) of a client, a checkpoint reads the rows it
wrote once per stream; past it, once per chunk (bounded by the chunk)."""


class CheckpointGoneError(Exception):
    """The generation a stream was reading was replaced twice meanwhile: the response breaks
    off (no closing chunk), so the client sees an incomplete stream and starts again."""


@dataclass(frozen=True, slots=True)
class CheckpointStream:
    """An open checkpoint: its position and its frames, produced as the response is sent."""

    position: int
    frames: AsyncIterator[bytes]


async def open_checkpoint(
    service: SyncService, gateway_id: str, claims: Mapping[str, Any], *, whole_rows: bool
) -> CheckpointStream:
    """The checkpoint of ``gateway_id`` as this client may see it (``whole_rows`` for a client
    without view evictions); :class:`NotFoundError` when the gateway has none yet (the client
    then pulls from 0)."""
    store = service.store
    info = await anyio.to_thread.run_sync(store.checkpoint, gateway_id)
    if info is None:
        raise NotFoundError(f"no checkpoint for gateway {gateway_id!r} yet; pull from since=0")
    rules = await anyio.to_thread.run_sync(store.get_rules, gateway_id)
    raw = rules.stamp == 0
    client_id = str(claims["sub"])
    stamp = 0
    history = ViewHistory.fixed(None, claims)
    written: set[RowKey] | None = set()
    if not raw:
        claims = await anyio.to_thread.run_sync(service.bind, gateway_id, rules.rules, claims)
        view = await anyio.to_thread.run_sync(
            store.view_stamp, gateway_id, client_id, claims_hash(claims), claims
        )
        stamp = max(rules.stamp, view)
        versions, seen = await anyio.to_thread.run_sync(
            store.view_history, gateway_id, client_id, 0
        )
        history = ViewHistory(versions, seen or [(0, dict(claims))])
        # A fresh reader may hold the hidden rows it wrote: read them once when they are few
        # (a fresh client's first sync wrote none), else look up each chunk's hidden rows.
        written = await anyio.to_thread.run_sync(
            store.rows_written_if_few, gateway_id, client_id, WRITTEN_AT_ONCE
        )
    applied = effective_rules(rules.rules, claims)
    reader = Reader(
        client_id,
        claims,
        applied,
        stamp,
        0,
        history,
        frozenset(written or ()),
        whole_rows=whole_rows,
    )

    def written_among(keys: list[RowKey]) -> set[RowKey]:
        return store.rows_written_among(gateway_id, client_id, keys)

    lookup = written_among if written is None else None

    def frame(seq: int) -> bytes | None:
        body = store.checkpoint_chunk(gateway_id, info.position, seq)
        if body is None:
            raise CheckpointGoneError(
                f"checkpoint {info.position} of {gateway_id!r} was replaced while streaming"
            )
        return serve_chunk(body, reader, raw, info.position, lookup)

    async def frames() -> AsyncIterator[bytes]:
        # The next chunk is read and encoded while this one is sent: at most two in memory.
        loop = asyncio.get_running_loop()
        following = loop.run_in_executor(None, frame, 0) if info.chunks else None
        try:
            for seq in range(info.chunks):
                assert following is not None
                out = await following
                following = None
                if seq + 1 < info.chunks:
                    following = loop.run_in_executor(None, frame, seq + 1)
                if out is not None:
                    yield out
        finally:
            if following is not None:  # the client went away: drop the chunk being read
                following.cancel()

    return CheckpointStream(info.position, frames())


async def check_cursor(
    service: SyncService, gateway_id: str, sub: str, since: int, page: PullResult,
    *, whole_rows: bool,
) -> None:
    """Refuse a pull ``page`` read from ``since`` if the hot log no longer holds what follows it
    (call after reading the page); else, for a client without view evictions, hold the cursor
    it is answered for its push answers (:class:`~lakesync.api.services.sync.HeldCursors`)."""
    trimmed = await anyio.to_thread.run_sync(service.store.trimmed_through, gateway_id)
    if since < trimmed:
        raise CursorExpiredError(
            f"cursor {since} is older than the hot log of gateway {gateway_id!r} retains "
            f"(deltas through {trimmed} were trimmed); start again from the checkpoint"
        )
    if whole_rows:
        service.cursors.answered(gateway_id, sub, page.server_hlc)
