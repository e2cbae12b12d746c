"""The local replica: one SQLite file holding user tables, cell clocks, outbox and cursors.

Layout (all bookkeeping tables start with ``_ls_``, which user tables may not):

- one table per synced table: ``row_id TEXT PRIMARY KEY`` plus one column per schema column,
  holding the *visible* merged row (what ``query()`` reads);
- ``_ls_rows``: per row its *remote* state (what the gateway sent) as one encoded
  :class:`~lakesync.merge.RowState` (each cell's winning value and ``(hlc, client_id)``, the
  greatest write clock and the tombstone; msgpack, :func:`~lakesync.merge.encode_row_state_binary`,
  rows written before that keep their JSON until they change), and the base of the last view
  eviction applied to it; one SQLite row per synced row, so a bulk load writes two rows per row
  (this and the user table's, both as multi-row INSERTs). Replicas of the earlier per-cell
  layout (``_ls_cells``) are folded into it when opened;
- ``_ls_outbox``: local deltas the gateway has not acknowledged, or acknowledged (``acked``, the
  push reply's server HLC) but not yet sent back by a pull, in write order, with their row;
- ``_ls_dead_letters``: deltas the gateway refused for good;
- ``_ls_cursors``: per gateway the server ingest HLC pulled up to;
- ``_ls_schemas``: each table's schema and version; ``_ls_meta``: client id and last HLC.

**Pending writes win until the gateway has them.** A user table shows, per row, the core merge
of the remote state and the row's outbox deltas: remote deltas change only the remote state and
the visible row is recomputed over the outbox, so an unsynced local edit loses only to a cell
with a higher clock, whatever arrives (HTTP pull, WebSocket broadcast, a gateway's row
snapshot), and across restarts. An acknowledged write stays in the outbox (marked ``acked``, no
longer pushed) until a pull page commits a cursor at or past its ack's server HLC: by then the
remote state holds it (or the row left the view), so a snapshot or broadcast that arrives in
between cannot hide it. A refused write (dead letter) leaves the outbox and its row is
recomputed without it. A gateway's *view eviction* (:func:`lakesync.delta.is_view_eviction`)
makes the replica forget the row's remote state: the row left this client's view, or the
gateway re-sends it with its real clocks. An eviction whose base (its HLC, an ingest stamp) is
not above the last one applied to the row is stale (a broadcast overtaken by a pull): it and the
rest of that row's snapshot in the same batch are skipped.

Every method runs in one transaction: a local write commits its data, outbox entry and the HLC
together; a pulled page commits its rows with the cursor. The merge itself is the core's
:func:`lakesync.merge.apply_delta`; this module only loads and stores its states.
"""

from __future__ import annotations

import datetime as dt
import decimal
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from lakesync.client._columns import (
    encode_json,
)
from lakesync.client._outbox import DeadLetter, Outbox, OutboxEntry
from lakesync.client._replica import ReplicaFile
from lakesync.client._rows import ReplicaRows
from lakesync.client._schemas import ReplicaSchemas
from lakesync.client.errors import ValidationError
from lakesync.column_types import encode_value
from lakesync.schema import ColumnSpec, TableSchema

__all__ = ["DeadLetter", "LocalStore", "OutboxEntry", "ReadQueries"]

_TIMESTAMP = ColumnSpec("param", "timestamp")

# Actions query() allows: reading only (sqlite3 authorizer action codes).
_READ_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, 33}  # 33 = RECURSIVE
)


class ReadQueries:
    """Read-only SQL over the replica's tables."""

    def __init__(self, file: ReplicaFile) -> None:
        self._file = file

    def query(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[dict[str, Any]]:
        """Run a read-only SQL statement; rows as dicts of Python values (see
        :mod:`lakesync.client._columns`). Parameters bind as the columns store them: an aware
        ``datetime`` as canonical UTC text, a ``date`` as ISO text, a ``Decimal`` as plain text
        (compares equal to a decimal of the same scale), dicts and lists as JSON text."""
        return self.query_tables(sql, params)[0]

    def query_tables(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> tuple[list[dict[str, Any]], frozenset[str]]:
        """Like :meth:`query`, also naming the tables the statement reads (lower case)."""
        tables: set[str] = set()

        def authorize(action: int, arg1: str | None, *_: object) -> int:
            if action == sqlite3.SQLITE_READ and arg1:
                tables.add(arg1.lower())
            return sqlite3.SQLITE_OK if action in _READ_ACTIONS else sqlite3.SQLITE_DENY

        with self._file.lock:
            conn = self._file.conn
            # Setting an authorizer expires cached statements, so every query is re-checked.
            conn.set_authorizer(authorize)
            try:
                cur = conn.execute(sql, _bind(params))
                names = [d[0] for d in cur.description or ()]
                rows = cur.fetchall()
            except sqlite3.DatabaseError as exc:
                if "not authorized" in str(exc):
                    raise ValidationError(
                        "query() is read-only; change rows with insert/update/delete so the "
                        "changes are synced"
                    ) from None
                raise ValidationError(f"query failed: {exc}") from None
            finally:
                conn.set_authorizer(None)
        return [dict(zip(names, row, strict=True)) for row in rows], frozenset(tables)


class LocalStore:
    """The SQLite replica behind a client; thread-safe (one connection behind a lock). It is
    made of parts with one job each, which it holds: the file (``file``,
    :class:`~lakesync.client._replica.ReplicaFile`), the schemas (``tables``,
    :class:`~lakesync.client._schemas.ReplicaSchemas`), the rows (``rows``,
    :class:`~lakesync.client._rows.ReplicaRows`), the outbox (``queue``,
    :class:`~lakesync.client._outbox.Outbox`) and read-only queries (``queries``); its
    methods are theirs."""

    def __init__(self, path: str, schemas: Sequence[TableSchema] = ()) -> None:
        self.file = ReplicaFile(path)

        def refill(c: sqlite3.Connection, table: str) -> None:
            # A widened column's rows are written again by the rows' part.
            self.rows.refill(c, table)

        try:
            self.tables = ReplicaSchemas(self.file, refill)
            self.rows = ReplicaRows(self.file, self.tables)
            self.tables.declare(schemas)
        except BaseException:
            self.file.close()
            raise
        self.queue = Outbox(self.file, self.rows)
        self.queries = ReadQueries(self.file)
        # The store's calls are its parts' (see each for what it does).
        self.tx = self.file.tx
        self.get_meta = self.file.get_meta
        self.set_meta = self.file.set_meta
        self.close = self.file.close
        self.schema = self.tables.schema
        self.schemas = self.tables.schemas
        self.adopt = self.tables.adopt
        self.unknown = self.tables.unknown
        self.write = self.rows.write
        self.apply_remote = self.rows.apply_remote
        self.get = self.rows.get
        self.row_state = self.rows.row_state
        self.cursor = self.rows.cursor
        self.begin_resync = self.rows.begin_resync
        self.finish_resync = self.rows.finish_resync
        self.outbox = self.queue.oldest
        self.ack = self.queue.ack
        self.record_failure = self.queue.record_failure
        self.dead_letter = self.queue.dead_letter
        self.dead_letters = self.queue.dead_letters
        self.dead_letter_count = self.queue.dead_letter_count
        self.requeue_dead_letters = self.queue.requeue_dead_letters
        self.queue_depth = self.queue.queue_depth
        self.query = self.queries.query
        self.query_tables = self.queries.query_tables

    @property
    def conn(self) -> sqlite3.Connection:
        """See :attr:`ReplicaFile.conn`."""
        return self.file.conn

    @property
    def lock(self) -> threading.RLock:
        """See :attr:`ReplicaFile.lock`."""
        return self.file.lock

    @property
    def closed(self) -> bool:
        """See :attr:`ReplicaFile.closed`."""
        return self.file.closed


def _bind(params: Sequence[Any] | Mapping[str, Any]) -> Sequence[Any] | Mapping[str, Any]:
    # Bind parameters the way the columns store them (see lakesync.client._columns).
    if isinstance(params, Mapping):
        return {k: _param(v) for k, v in params.items()}
    return [_param(v) for v in params]


def _param(value: Any) -> Any:
    if isinstance(value, dict | list):
        return encode_json(value)
    if isinstance(value, dt.datetime):
        # Timestamps are stored as canonical UTC text: compare an instant in the same form.
        return encode_value(_TIMESTAMP, value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    return value
