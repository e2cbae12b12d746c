"""Move accepted deltas from the gateway's hot log into the Iceberg landing table, exactly once.

The flusher is the landing table's only writer. Each batch is one Iceberg commit whose snapshot
summary records the hot-log position (ingest HLC) the table is complete through
(:data:`~lakesync.lakehouse.catalog.POSITION_PROPERTY`), in the same atomic commit as the rows. On
start
and before every batch the flusher reads that position back from the table, so:

- a crash before the commit leaves neither rows nor position: the batch is read again;
- a crash after the commit but before the hot log heard about it (``mark_flushed``) leaves rows and
  position together: the next read starts after them, and the hot log is told again.

Either way every deltaId lands exactly once. When the lake's object store fails (unreachable, or
refusing the credentials) the flush fails whole and is tried again
(:class:`~lakesync.lakehouse.object_store.ObjectStoreError`), nothing committed; so does it
while a REST catalog is unreachable or refuses the credential, from the gateway's start on or
later (:class:`~lakesync.lakehouse.catalog.CatalogUnavailableError`).

One tenant cannot stop the others: when a batch cannot be written, the flusher writes it again
gateway by gateway in one commit, and a gateway whose rows still fail is *held back*. The commit
records it (:data:`~lakesync.lakehouse.catalog.HELD_PROPERTY`: the position that gateway is complete
through) while the position moves on for everyone else; its entries wait in the hot log, and each
flush first retries them, in ingest order, releasing the gateway once it caught up. Rows that land
that late carry ingest positions the incremental models may have passed: their commit says so
(:data:`~lakesync.lakehouse.catalog.LANDED_LATE_PROPERTY`), and the next pipeline run rebuilds the
models in full so they take them in.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from lakesync import telemetry
from lakesync.canonical import canonical_json
from lakesync.errors import (
    BackpressureError,
    LakeSyncError,
    StoreUnavailableError,
    first_line,
    is_store_outage,
)
from lakesync.hotlog.ports import HotLogSource
from lakesync.hotlog.records import LogEntry
from lakesync.lakehouse.catalog import (
    HELD_PROPERTY,
    LANDED_LATE_PROPERTY,
    POSITION_PROPERTY,
    CatalogUnavailableError,
    catalog_failure,
    catalog_opener,
    ensure_landing_table,
    landing_schema,
    landing_state,
)
from lakesync.lakehouse.object_store import (
    ObjectStoreError,
    object_store_failure,
    warehouse_full,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table, Transaction

__all__ = [
    "CRASH_ENV",
    "FlushResult",
    "LandingFlusher",
    "LandingRaceError",
    "landing_rows",
]

_log = logging.getLogger(__name__)

# Test hook: name a step ("before_commit" or "after_commit") and the process SIGKILLs itself there,
# which is the only faithful way to test what a crash leaves behind.
CRASH_ENV = "LAKESYNC_LANDING_CRASH_AT"


@dataclass(frozen=True, slots=True)
class FlushResult:
    """What one :meth:`LandingFlusher.flush` call committed, and the gateways held back after it."""

    rows: int
    commits: int
    position: int | None
    held: tuple[str, ...] = ()


class LandingRaceError(BackpressureError):
    """Another process landed the hot log while this flush was committing (this one's landing
    mutex went with its session, e.g. a PostgreSQL restart mid-flush): nothing of this flush was
    committed, and the next flush starts from the position the other one landed through."""


def landing_rows(entries: Sequence[LogEntry], ingested_at: datetime) -> pa.Table:
    """Hot-log entries as an Arrow table in the landing schema (pure: no I/O)."""
    # heavy, optional (extra "pipeline")
    import pyarrow as pa  # noqa: PLC0415

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


def _properties(through: int, held: dict[str, int], late: int | None = None) -> dict[str, str]:
    """The snapshot summary of a landing commit: the position, any held-back gateways, and the
    lowest ingest HLC of rows landing late."""
    props = {POSITION_PROPERTY: str(through)}
    if held:
        props[HELD_PROPERTY] = json.dumps(held, sort_keys=True)
    if late is not None:
        props[LANDED_LATE_PROPERTY] = str(late)
    return props


def _crash_point(step: str) -> None:
    if os.environ.get(CRASH_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


class LandingFlusher:
    """Append hot-log entries to ``lakesync.landing`` in batches, one Iceberg commit per batch.

    ``mark_flushed`` (optional) tells the hot log how far the lake is durable, e.g. so it can count
    un-flushed data for backpressure; it is called after each commit and again on start, with the
    position every gateway but the held-back ones is complete through (a held-back gateway must
    not push every tenant into backpressure).
    ``before_flush`` (optional) runs at the start of every flush, under the same lock: the gateway
    publishes its registered schemas there (:mod:`lakesync.lakehouse.registry`). ``exclusive``
    (optional) is entered around every flush too: a mutex shared with the other processes that
    may flush the same landing table (each then starts from the position the last one committed).
    ``catalog`` may be an opener (:func:`~lakesync.lakehouse.catalog.deferred_catalog`): the
    flusher then starts while the catalog cannot be opened, and each flush tries again.
    """

    def __init__(
        self,
        catalog: Catalog | Callable[[], Catalog],
        source: HotLogSource,
        *,
        batch_size: int = 50_000,
        mark_flushed: Callable[[int], None] | None = None,
        before_flush: Callable[[], object] | None = None,
        exclusive: Callable[[], AbstractContextManager[object]] = nullcontext,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._catalog = catalog_opener(catalog)
        self._source = source
        self._batch_size = batch_size
        self._mark_flushed = mark_flushed
        self._before_flush = before_flush
        self._exclusive = exclusive
        self._clock = clock
        self._lock = threading.Lock()
        self._table: Table | None = None
        self._opened: Catalog | None = None  # the catalog, once it could be opened
        self._failing: str | None = None  # what the last failed flush (or the start) logged
        # The gateway starts whatever the lake answers: pushes wait in the hot log and each
        # flush tries again.
        try:
            self._landing()
        except (ObjectStoreError, CatalogUnavailableError) as exc:
            self._failing = str(exc)
            _log.error("landing: %s; each flush tries again", exc)
        except Exception:  # none the flusher knows: its stack, in the one (redacted) log line
            _log.exception("landing: cannot open the landing table; each flush tries again")

    def _landing(self) -> Table:
        """The landing table, created if missing; raises
        :class:`~lakesync.lakehouse.object_store.ObjectStoreError` while the store fails,
        :class:`~lakesync.lakehouse.catalog.CatalogUnavailableError` while the catalog cannot be
        opened."""
        if self._table is None:
            catalog = self._opened = self._catalog()
            try:
                self._table = ensure_landing_table(catalog)
            except Exception as exc:
                failure = self._store_failure(exc) or catalog_failure(exc, catalog)
                if failure is None:
                    raise
                raise failure from exc
        return self._table

    def _store_failure(self, exc: Exception) -> ObjectStoreError | None:
        """``exc`` as the object store's failure (naming what to check), or None: another."""
        if self._opened is None:
            return None
        props = self._opened.properties
        warehouse = str(props.get("warehouse", ""))
        return object_store_failure(
            str(exc), warehouse, props.get("s3.endpoint")
        ) or warehouse_full(exc, warehouse)

    def _state(self) -> tuple[int | None, dict[str, int]]:
        table = self._table = self._landing().refresh()
        return landing_state(table)

    def position(self) -> int | None:
        """The hot-log position the landing table is complete through (from the table itself)."""
        return self._state()[0]

    def flush(self, max_batches: int | None = None) -> FlushResult:
        """Commit everything the hot log holds past the landing position (or ``max_batches``);
        entries appended while the flush runs may wait for the next one.

        Thread-safe; answers once the batches are committed (what the admin flush route needs).
        Raises :class:`~lakesync.lakehouse.object_store.ObjectStoreError` when the lake's object
        store fails, :class:`~lakesync.lakehouse.catalog.CatalogUnavailableError` while the
        catalog cannot be opened or a REST catalog does not answer (nothing committed: the next
        flush takes it up), :class:`~lakesync.errors.StoreUnavailableError` while the hot log's
        server cannot serve.
        """
        try:
            return self._flush(max_batches)
        except LakeSyncError:  # says what failed already (the store's, the catalog's, ...)
            raise
        except Exception as exc:
            from pyiceberg.exceptions import CommitFailedException  # noqa: PLC0415 -- loaded by now

            if isinstance(exc, CommitFailedException):
                raise LandingRaceError(
                    "another gateway process landed the hot log while this flush committed; "
                    f"nothing of this flush was committed ({first_line(exc)})"
                ) from exc
            if is_store_outage(exc):  # the hot log's server: one line, not a stack trace
                raise StoreUnavailableError(
                    f"the hot-log store is unavailable ({first_line(exc)})"
                ) from exc
            failure = self._store_failure(exc) or (
                None if self._opened is None else catalog_failure(exc, self._opened)
            )
            if failure is None:
                raise
            raise failure from exc

    def _flush(self, max_batches: int | None) -> FlushResult:
        with self._lock, self._exclusive():
            if self._before_flush is not None:
                self._before_flush()
            rows = commits = 0
            pos, held = self._state()
            if pos is not None and self._mark_flushed is not None:
                # The previous run may have died between its commit and this notification.
                self._mark_flushed(pos)
            for gw in sorted(held):
                assert pos is not None  # a gateway is held back only by a commit with a position
                while gw in held and (max_batches is None or commits < max_batches):
                    landed = self._catch_up(gw, pos, held)
                    if landed is None:
                        break
                    rows += landed
                    commits += 1
            while max_batches is None or commits < max_batches:
                entries = self._source.read_log(pos if pos is not None else -1, self._batch_size)
                if not entries:
                    break
                landed = self._land(entries, pos, held)
                pos = entries[-1][0]
                rows += landed
                commits += 1
                if len(entries) < self._batch_size:
                    # The tail of the log as this flush found it: what pushes append meanwhile
                    # waits for the next flush, rather than a flush that never ends chasing
                    # the tail with ever smaller commits (each commit costs more than its rows).
                    break
            return FlushResult(rows, commits, pos, tuple(sorted(held)))

    def _land(self, entries: Sequence[LogEntry], pos: int | None, held: dict[str, int]) -> int:
        """Commit a batch read past ``pos`` and move the position to its end; the entries of
        held-back gateways are left out, and a gateway whose rows cannot be written joins them
        (``held`` is updated). Returns the rows landed."""
        through = entries[-1][0]
        ready = [e for e in entries if e[1] not in held]
        with telemetry.flush_span(through, {"lakesync.entries": len(entries)}):
            return self._commit(entries, ready, pos, held)

    def _commit(
        self,
        entries: Sequence[LogEntry],
        ready: list[LogEntry],
        pos: int | None,
        held: dict[str, int],
    ) -> int:
        through = entries[-1][0]
        tx = self._transaction()
        try:
            # Rows and position land in one snapshot: the commit is the only point of no return.
            tx.append(
                landing_rows(ready, self._clock()),
                snapshot_properties=_properties(through, held),
            )
        except Exception as exc:
            store = self._store_failure(exc)
            if store is not None:
                # The store failed, not one gateway's rows: hold nobody back (a store back by
                # the commit would land them late), the whole batch is tried again.
                raise store from exc
            tx = self._transaction()
            ready = self._isolate(tx, ready, -1 if pos is None else pos, held)
            tx.append(
                landing_rows([], self._clock()), snapshot_properties=_properties(through, held)
            )
        self._finish(tx, through)
        return len(ready)

    def _isolate(
        self, tx: Transaction, entries: Sequence[LogEntry], pos: int, held: dict[str, int]
    ) -> list[LogEntry]:
        """Append ``entries`` to ``tx`` gateway by gateway; hold back (from ``pos``) each gateway
        whose rows cannot be written. Returns the entries appended."""
        groups: dict[str, list[LogEntry]] = {}
        for e in entries:
            groups.setdefault(e[1], []).append(e)
        appended: list[LogEntry] = []
        for gw, group in groups.items():
            try:
                tx.append(landing_rows(group, self._clock()))
            except Exception as exc:
                held[gw] = pos
                _log.error(
                    "landing: the rows of gateway %r cannot be written (%s); holding back its "
                    "entries after ingest %d in the hot log, the other gateways go on",
                    gw,
                    exc,
                    pos,
                )
            else:
                appended.extend(group)
        return appended

    def _catch_up(self, gw: str, pos: int, held: dict[str, int]) -> int | None:
        """Commit one batch of a held-back gateway's entries up to ``pos`` (in ingest order),
        releasing the gateway once none are left. Returns the rows landed, None on failure."""
        entries = self._source.read_log(held[gw], self._batch_size, gateway_id=gw)
        backlog = [e for e in entries if e[0] <= pos]
        after = dict(held)
        if len(entries) < self._batch_size or len(backlog) < len(entries):
            del after[gw]
        else:
            after[gw] = backlog[-1][0]
        tx = self._transaction()
        try:
            late = backlog[0][0] if backlog else None
            tx.append(
                landing_rows(backlog, self._clock()),
                snapshot_properties=_properties(pos, after, late),
            )
        except Exception as exc:
            _log.error(
                "landing: gateway %r is still held back, its entries after ingest %d wait in the "
                "hot log: %s",
                gw,
                held[gw],
                exc,
            )
            return None
        self._finish(tx, pos)
        held.clear()
        held.update(after)
        if backlog:
            _log.warning(
                "landing: held-back entries of gateway %r (through ingest %d) landed late; the "
                "next pipeline run rebuilds the models in full to take them in",
                gw,
                backlog[-1][0],
            )
        return len(backlog)

    def _transaction(self) -> Transaction:
        # Not the table's own: one whose commit cost does not grow with the table's history.
        # The one first-party import here: the module subclasses pyiceberg's Transaction, so
        # importing it loads pyiceberg.table (heavy, ~1 s; optional, extra "pipeline"), which a
        # gateway without the lake and `lakesync query`'s start must not pay.
        from lakesync.lakehouse._transaction import LandingTransaction  # noqa: PLC0415

        return LandingTransaction(self._landing())

    def _finish(self, tx: Transaction, through: int) -> None:
        _crash_point("before_commit")
        self._table = tx.commit_transaction()
        _crash_point("after_commit")
        if self._mark_flushed is not None:
            self._mark_flushed(through)

    def scheduled_flush(self, retry_s: float) -> None:
        """One scheduled flush (the lake runtime calls it every ``retry_s`` seconds while this
        process leads the landing): a failed batch is not lost (the position did not move), so
        a failure is logged and the next one retries.

        An outage of the store or the catalog is one log line saying what to check, not one a
        flush: a failure is logged when it differs from the last one, and the first flush that
        succeeds after it says so."""
        try:
            self.flush()
            if self._failing is not None:
                _log.info("landing: the lake answers again, flushes go on")
                self._failing = None
        except (ObjectStoreError, CatalogUnavailableError, BackpressureError) as exc:
            if str(exc) != self._failing:
                _log.error("landing flush failed: %s; retrying every %.0f s", exc, retry_s)
            self._failing = str(exc)
        except Exception:
            _log.exception("landing flush failed; retrying in %.0f s", retry_s)
