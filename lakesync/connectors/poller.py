"""The poller: runs a :class:`~lakesync.connectors.base.Source` into a
:class:`~lakesync.connectors.base.Sink`
every ``interval`` seconds, one chunk at a time, until stopped.

Each chunk is turned into deltas against the gateway's current rows (only real changes are
pushed), pushed, and then its cursor is stored: a crash between the two re-reads the chunk and
pushes nothing twice. A gateway that answers with backpressure is waited on and retried (the
chunk is never dropped); any other error ends the poll, is kept as the last error and the next
poll starts from the last stored cursor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import msgspec

from lakesync.connectors._changes import Chunk, KeySet, changes_for
from lakesync.connectors.base import Sink, Source
from lakesync.errors import BackpressureError, RateLimitedError

__all__ = ["ConnectorStatus", "Poller"]

_log = logging.getLogger("lakesync.connectors")


class ConnectorStatus(msgspec.Struct):
    """Counters and the last outcome of one connector (what the status route shows)."""

    state: str = "idle"
    polls: int = 0
    failed_polls: int = 0
    rows_read: int = 0
    deltas_pushed: int = 0
    backpressure_waits: int = 0
    last_poll_started: float | None = None
    last_poll_seconds: float | None = None
    last_success: float | None = None
    last_error: str | None = None
    last_error_at: float | None = None


class Poller:
    """One connector's loop: ``name`` for logs, ``client_id`` stamped on its deltas; with
    ``lead``, a poll runs only while it answers true (one poller among gateway processes)."""

    def __init__(
        self,
        name: str,
        source: Source,
        sink: Sink,
        client_id: str,
        interval: float,
        backpressure_wait: float = 1.0,
        lead: Callable[[], Awaitable[bool]] | None = None,
        chunk_rows: int = 500,
    ) -> None:
        self.name = name
        self.source = source
        self.sink = sink
        self.client_id = client_id
        self.interval = interval
        self.backpressure_wait = backpressure_wait
        self.lead = lead
        self.chunk_rows = chunk_rows
        self.status = ConnectorStatus()
        self._task: asyncio.Task[None] | None = None

    async def poll_once(self) -> int:
        """One full poll; returns how many deltas it pushed. Raises what the source raised."""
        status = self.status
        status.state = "polling"
        status.last_poll_started = time.time()
        started = time.monotonic()
        pushed = 0
        try:
            await self.sink.register(await self.source.schemas())
            cursor = await self.sink.load_cursor()
            async with contextlib.aclosing(self.source.poll(cursor)) as chunks:
                async for chunk in chunks:
                    pushed += await self._store(chunk)
        except Exception as exc:
            status.failed_polls += 1
            status.last_error = f"{type(exc).__name__}: {exc}"
            status.last_error_at = time.time()
            raise
        finally:
            status.polls += 1
            status.last_poll_seconds = time.monotonic() - started
            status.state = "idle"
        status.last_success = time.time()
        return pushed

    async def _store(self, chunk: Chunk) -> int:
        self.status.rows_read += len(chunk.upserts)
        pushed = await self._push(chunk)
        if chunk.keep_only is not None:
            pushed += await self._delete_unseen(chunk.table, chunk.keep_only)
        if chunk.cursor is not None:
            await self.sink.save_cursor(chunk.cursor)
        return pushed

    async def _delete_unseen(self, table: str, seen: KeySet) -> int:
        """Delete the stored rows of ``table`` not in ``seen``, a page of ids at a time."""
        pushed = 0
        after: str | None = None
        while page := await self.sink.row_ids(table, after, self.chunk_rows):
            gone = seen.missing(page)
            if gone:
                pushed += await self._push(Chunk(table, deletes=gone))
            after = page[-1]
        return pushed

    async def _push(self, chunk: Chunk) -> int:
        """Push what ``chunk`` changes (waiting out backpressure); how many deltas."""
        pushed = 0
        ids = chunk.row_ids()
        while ids:
            current = await self.sink.current(chunk.table, ids)
            deltas = changes_for(chunk, current, self.client_id, self.sink.next_hlc)
            if not deltas:
                break
            try:
                await self.sink.push(deltas)
            except (BackpressureError, RateLimitedError) as exc:
                # The gateway is full: wait for a flush, then recompute (rows may have moved).
                self.status.backpressure_waits += 1
                self.status.state = "waiting (backpressure)"
                wait = getattr(exc, "retry_after", self.backpressure_wait)
                await asyncio.sleep(max(wait, self.backpressure_wait))
                continue
            pushed = len(deltas)
            break
        self.status.deltas_pushed += pushed
        return pushed

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Run polls in the background until :meth:`stop`."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Cancel the loop (a half-stored chunk is re-read on the next start) and close the
        source."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.status.state = "stopped"
        await self.source.aclose()

    async def _run(self) -> None:
        while True:
            try:
                if self.lead is None or await self.lead():
                    await self.poll_once()
                else:
                    self.status.state = "standby (another gateway process polls)"
            except Exception as exc:  # kept in the status; the next poll retries
                _log.warning("connector %s: poll failed: %s", self.name, type(exc).__name__)
            await asyncio.sleep(self.interval)
