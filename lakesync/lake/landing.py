"""Move accepted deltas from the gateway's hot log into the Iceberg landing table, exactly once.

The flusher is the landing table's only writer. Each batch is one Iceberg commit whose snapshot
summary records the hot-log position (ingest HLC) the table is complete through
(:data:`~lakesync.lake.catalog.POSITION_PROPERTY`), in the same atomic commit as the rows. On start
and before every batch the flusher reads that position back from the table, so:

- a crash before the commit leaves neither rows nor position: the batch is read again;
- a crash after the commit but before the hot log heard about it (``mark_flushed``) leaves rows and
  position together: the next read starts after them, and the hot log is told again.

Either way every deltaId lands exactly once.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from lakesync.canonical import canonical_json
from lakesync.delta import RowDelta
from lakesync.lake.catalog import POSITION_PROPERTY, ensure_landing_table, flushed_position

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

__all__ = [
    "CRASH_ENV",
    "FlushResult",
    "HotLogSource",
    "LandingFlusher",
    "landing_rows",
]

LogEntry = tuple[int, str, RowDelta]
"""One hot-log entry: ``(ingest_hlc, gateway_id, delta)``."""

_log = logging.getLogger(__name__)

# Test hook: name a step ("before_commit" or "after_commit") and the process SIGKILLs itself there,
# which is the only faithful way to test what a crash leaves behind.
CRASH_ENV = "LAKESYNC_LANDING_CRASH_AT"


class HotLogSource(Protocol):
    """What the flusher reads: the gateway's hot log in strictly increasing ingest HLC order."""

    def read_log(self, after: int, limit: int) -> list[LogEntry]:
        """Entries with ``ingest_hlc > after``, oldest first, at most ``limit``."""
        ...


@dataclass(frozen=True, slots=True)
class FlushResult:
    """What one :meth:`LandingFlusher.flush` call committed."""

    rows: int
    commits: int
    position: int | None


def landing_rows(entries: Sequence[LogEntry], ingested_at: datetime) -> pa.Table:
    """Hot-log entries as an Arrow table in the landing schema (pure: no I/O)."""
    import pyarrow as pa

    from lakesync.lake.catalog import landing_schema

    cells = [
        [{"column": c.column, "value_json": canonical_json(c.value)} for c in d.columns]
        for _, _, d in entries
    ]
    # The canonical JSON of the [{column, value}] list, assembled from the per-cell texts (keys
    # "column" < "value" already sorted; column names are validated identifiers, nothing to
    # escape): encoding each value once halves the flusher's CPU time.
    columns_json = [
        "[" + ",".join(f'{{"column":"{c["column"]}","value":{c["value_json"]}}}' for c in row) + "]"
        for row in cells
    ]
    data: dict[str, list[Any]] = {
        "gateway_id": [gw for _, gw, _ in entries],
        "ingest_hlc": [pos for pos, _, _ in entries],
        "delta_id": [d.delta_id for _, _, d in entries],
        "op": [d.op for _, _, d in entries],
        "table_name": [d.table for _, _, d in entries],
        "row_id": [d.row_id for _, _, d in entries],
        "client_id": [d.client_id for _, _, d in entries],
        "hlc": [Decimal(d.hlc) for _, _, d in entries],
        "columns_json": columns_json,
        "cells": cells,
        "ingested_at": [ingested_at] * len(entries),
    }
    schema = landing_schema().as_arrow()
    return pa.Table.from_pydict(data, schema=schema)


def _crash_point(step: str) -> None:
    if os.environ.get(CRASH_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


class LandingFlusher:
    """Append hot-log entries to ``lakesync.landing`` in batches, one Iceberg commit per batch.

    ``mark_flushed`` (optional) tells the hot log how far the lake is durable, e.g. so it can count
    un-flushed data for backpressure and trim; it is called after each commit and again on start.
    ``before_flush`` (optional) runs at the start of every flush, under the same lock: the gateway
    publishes its registered schemas there (:mod:`lakesync.lake.registry`).
    """

    def __init__(
        self,
        catalog: Catalog,
        source: HotLogSource,
        *,
        batch_size: int = 50_000,
        mark_flushed: Callable[[int], None] | None = None,
        before_flush: Callable[[], object] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._catalog = catalog
        self._source = source
        self._batch_size = batch_size
        self._mark_flushed = mark_flushed
        self._before_flush = before_flush
        self._clock = clock
        self._lock = threading.Lock()
        self._table: Table = ensure_landing_table(catalog)

    def position(self) -> int | None:
        """The hot-log position the landing table is complete through (from the table itself)."""
        self._table = self._table.refresh()
        return flushed_position(self._table)

    def flush(self, max_batches: int | None = None) -> FlushResult:
        """Commit everything the hot log holds past the landing position (or ``max_batches``).

        Thread-safe; answers once the batches are committed (what the admin flush route needs).
        """
        with self._lock:
            if self._before_flush is not None:
                self._before_flush()
            rows = commits = 0
            pos = self.position()
            if pos is not None and self._mark_flushed is not None:
                # The previous run may have died between its commit and this notification.
                self._mark_flushed(pos)
            while max_batches is None or commits < max_batches:
                entries = self._source.read_log(pos if pos is not None else -1, self._batch_size)
                if not entries:
                    break
                pos = self._commit(entries)
                rows += len(entries)
                commits += 1
            return FlushResult(rows, commits, pos)

    def _commit(self, entries: Sequence[LogEntry]) -> int:
        through = entries[-1][0]
        batch = landing_rows(entries, self._clock())
        tx = self._table.transaction()
        # Rows and position land in one snapshot: the commit is the only point of no return.
        tx.append(batch, snapshot_properties={POSITION_PROPERTY: str(through)})
        _crash_point("before_commit")
        self._table = tx.commit_transaction()
        _crash_point("after_commit")
        if self._mark_flushed is not None:
            self._mark_flushed(through)
        return through

    def run(self, stop: threading.Event, *, interval_s: float = 5.0) -> None:
        """Flush every ``interval_s`` seconds until ``stop`` is set (batching by age and size)."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.flush()
            except Exception:
                # A failed batch is not lost (the position did not move): log it and retry later.
                _log.exception("landing flush failed; retrying in %.0f s", interval_s)
            stop.wait(max(0.0, interval_s - (time.monotonic() - started)))
