"""The poller: runs a :class:`~lakesync.connectors.base.Source` into a
:class:`~lakesync.connectors.base.Sink`
every ``interval`` seconds, one chunk at a time, until stopped.

Each chunk's values are encoded for the gateway table's column types under the connector's
schema contract (:mod:`lakesync.connectors._contract`: refused rows and discarded values are
counted and logged), turned into deltas against the gateway's current rows (only real changes
are pushed), pushed, and then its cursor is stored: a crash between the two re-reads the chunk and
pushes nothing twice. A gateway that answers with backpressure is waited on and retried (the
chunk is never dropped); any other error ends the poll, is kept as the last error and the next
poll starts from the last stored cursor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

import msgspec

from lakesync.connector_specs import ContractMode, SchemaContract, contract_for
from lakesync.connectors._changes import Chunk, KeySet, changes_for
from lakesync.connectors._contract import (
    ContractError,
    Refusal,
    encode_rows,
    merge_source_schema,
    widen_to_text,
)
from lakesync.connectors.base import Sink, Source
from lakesync.errors import BackpressureError, RateLimitedError
from lakesync.schema import TableSchema

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
    rows_refused: int = 0
    """Source rows the schema contract refused (``discard_row``, and ``freeze`` stops)."""
    values_discarded: int = 0
    """Source values the schema contract discarded (``discard_value``)."""
    last_refusal: str | None = None
    """The last refusal: table, row, column and why."""
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
        contract: SchemaContract | ContractMode | None = None,
    ) -> None:
        self.name = name
        self.source = source
        self.sink = sink
        self.client_id = client_id
        self.interval = interval
        self.backpressure_wait = backpressure_wait
        self.lead = lead
        self.chunk_rows = chunk_rows
        self.contract = SchemaContract() if contract is None else contract
        self.status = ConnectorStatus()
        self._schemas: dict[str, TableSchema] = {}
        self._noted: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    async def poll_once(self) -> int:
        """One full poll; returns how many deltas it pushed. Raises what the source raised."""
        status = self.status
        status.state = "polling"
        status.last_poll_started = time.time()
        started = time.monotonic()
        pushed = 0
        try:
            await self._register(await self.source.schemas())
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

    async def _register(self, schemas: Sequence[TableSchema]) -> None:
        """Register the source's schemas as the contract merges them into the gateway's."""
        stored = await self.sink.schemas()
        for schema in schemas:
            merged, notes = merge_source_schema(
                stored.get(schema.table), schema, contract_for(self.contract, schema.table)
            )
            for note in notes:
                if note not in self._noted:  # once per poller: a source is read every poll
                    self._noted.add(note)
                    _log.warning("connector %s: %s", self.name, note)
            if merged != stored.get(schema.table):
                await self.sink.register([merged])
            self._schemas[schema.table] = merged

    async def _encode(self, chunk: Chunk) -> None:
        """Encode ``chunk``'s rows for their columns under the contract (in place)."""
        contract = contract_for(self.contract, chunk.table)
        schema = self._schemas.get(chunk.table) or (await self.sink.schemas())[chunk.table]
        try:
            encoded = encode_rows(schema, chunk.upserts, contract)
            if encoded.widen:
                schema = widen_to_text(schema, encoded.widen)
                _log.warning(
                    "connector %s: table %r: columns %s widened to string (contract data_type:"
                    " evolve)", self.name, chunk.table, ", ".join(encoded.widen)
                )
                await self.sink.register([schema])
                self._schemas[chunk.table] = schema
                encoded = encode_rows(schema, chunk.upserts, contract)
        except ContractError as exc:
            self.status.rows_refused += 1
            self.status.last_refusal = exc.message
            raise
        self._count(encoded.refusals)
        chunk.upserts = encoded.rows

    def _count(self, refusals: Sequence[Refusal]) -> None:
        """Count and log refusals: one line per table, column and outcome per chunk."""
        grouped: dict[tuple[str, str, bool], list[Refusal]] = {}
        for r in refusals:
            grouped.setdefault((r.table, r.column, r.row_refused), []).append(r)
            if r.row_refused:
                self.status.rows_refused += 1
            else:
                self.status.values_discarded += 1
            self.status.last_refusal = r.message()
        for found in grouped.values():
            more = f" (and {len(found) - 1} more rows)" if len(found) > 1 else ""
            _log.warning("connector %s: %s%s", self.name, found[0].message(), more)

    async def _store(self, chunk: Chunk) -> int:
        self.status.rows_read += len(chunk.upserts)
        if chunk.schema is not None:
            await self._register([chunk.schema])
        if chunk.upserts:
            await self._encode(chunk)
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
