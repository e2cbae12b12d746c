"""The embedded hot log: one SQLite file in WAL mode with ``synchronous=FULL``.

Every write goes through a single writer thread that drains a queue of pending operations into
one transaction (group commit, :mod:`lakesync.hotlog._group`): concurrent pushes share one fsync,
each push is isolated by a savepoint so a failing batch rolls back alone, and a caller is answered
only after the commit is durable. Readers use their own per-thread connections and WAL
snapshots, so they never block the writer; because one writer assigns ingest HLCs in commit
order, readers never see gaps. A checkpointer thread copies the WAL into the database file after
commits (at most every :data:`_CHECKPOINT_INTERVAL` seconds), so no commit waits for a
checkpoint; a commit is durable once its WAL frames are synced, whatever the checkpointer has
done.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, TypeVar

from lakesync.hlc import HLC
from lakesync.hotlog._group import GroupCommit
from lakesync.hotlog._sql import (
    ADDED_COLUMNS,
    AFTER_COLUMNS_DDL,
    SqlHotLog,
    add_column,
    schema_ddl,
    table_info,
)
from lakesync.hotlog.base import RowKey, RowRecord, decode_state

__all__ = ["SqliteHotLog"]

T = TypeVar("T")

# INTEGER PRIMARY KEY makes the ingest HLC the rowid; WITHOUT ROWID clusters rows by their key.
_SCHEMA = schema_ddl(integer="INTEGER", blob="BLOB", keyed=" WITHOUT ROWID")

_CHECKPOINT_INTERVAL = 0.2
"""Seconds between WAL checkpoints while writes go on: bounds the WAL's growth."""

_log = logging.getLogger(__name__)


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


class SqliteHotLog(SqlHotLog[sqlite3.Connection]):
    """The SQLite implementation of :class:`HotLog` (one process; see module docstring)."""

    def __init__(self, path: Path, clock: HLC) -> None:
        super().__init__(clock)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._writer_conn = _connect(path)
        self._writer_conn.executescript(_SCHEMA)
        for table, column, typ in ADDED_COLUMNS:
            have = {row[1] for row in self._writer_conn.execute(table_info(table))}
            if column not in have:
                self._writer_conn.execute(
                    add_column(table, column, typ, integer="INTEGER", dialect="sqlite")
                )
        for statement in AFTER_COLUMNS_DDL:
            self._writer_conn.execute(statement)
        self._writer_conn.execute("BEGIN IMMEDIATE")
        self.fill_added_columns(self._writer_conn)
        self._writer_conn.execute("COMMIT")
        # The checkpointer thread checkpoints instead of the commit that crosses the threshold.
        self._writer_conn.execute("PRAGMA wal_autocheckpoint=0")
        self._wal_written = threading.Event()
        self._stopped = threading.Event()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._closed = False
        self._writes = GroupCommit(
            "hotlog-writer",
            lambda: nullcontext(self._writer_conn),
            lambda conn: conn.execute("BEGIN IMMEDIATE"),
            _rollback,
            self._wal_written.set,
        )
        self._checkpointer = threading.Thread(
            target=self._run_checkpointer, name="hotlog-checkpoint", daemon=True
        )
        self._checkpointer.start()

    # -- writer ---------------------------------------------------------------------------------
    def _write(self, op: Callable[[sqlite3.Connection], T]) -> T:
        return self._writes.write(op)

    def _run_checkpointer(self) -> None:
        conn = _connect(self._path)
        try:
            while True:
                self._wal_written.wait()
                if self._stopped.is_set():
                    return
                self._wal_written.clear()
                try:
                    # PASSIVE: copies what no reader still needs, never blocks the writer.
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error as exc:  # the WAL grows until a later checkpoint succeeds
                    _log.warning("WAL checkpoint failed: %s", exc)
                self._stopped.wait(_CHECKPOINT_INTERVAL)
        finally:
            conn.close()

    def _lock(self, conn: sqlite3.Connection) -> None:
        """Nothing to take: the one writer thread already runs every write in turn."""

    # -- readers --------------------------------------------------------------------------------
    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = _connect(self._path)
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        conn = self._reader()
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    # -- statements -----------------------------------------------------------------------------
    def _fetch(
        self,
        conn: sqlite3.Connection,
        query: str,
        params: Sequence[Any] = (),
        *,
        binary: bool = False,
    ) -> list[Any]:
        return conn.execute(query, params).fetchall()

    def _execute(self, conn: sqlite3.Connection, query: str, params: Sequence[Any] = ()) -> int:
        return conn.execute(query, params).rowcount

    def _execute_many(
        self, conn: sqlite3.Connection, query: str, rows: Sequence[Sequence[Any]]
    ) -> None:
        conn.executemany(query, rows)

    def _rows(
        self, conn: sqlite3.Connection, gw: str, keys: Sequence[RowKey]
    ) -> dict[RowKey, RowRecord]:
        # One statement per table and chunk of row ids (SQLite probes the primary key for each
        # id of an IN list) rather than one per row: a push reads the rows it touches.
        raw = self._by_keys(
            conn,
            "SELECT tbl, row_id, state, last_ingest FROM row_state"
            " WHERE gw = ? AND tbl = ? AND row_id IN",
            (gw,),
            keys,
        )
        found = {(str(t), str(r)): (s, li) for t, r, s, li in raw}
        # In the order of ``keys``, as the callers list rows.
        return {
            k: RowRecord(decode_state(found[k][0]), int(found[k][1])) for k in keys if k in found
        }

    def _written_among(
        self, conn: sqlite3.Connection, gw: str, client_id: str, keys: Sequence[RowKey]
    ) -> set[RowKey]:
        # SQLite probes the row index (gw, tbl, row_id) for each id of an IN list.
        rows = self._by_keys(
            conn,
            "SELECT DISTINCT tbl, row_id FROM log WHERE gw = ? AND client_id = ?"
            " AND tbl = ? AND row_id IN",
            (gw, client_id),
            keys,
        )
        return {(str(t), str(r)) for t, r in rows}

    # -- lifecycle ------------------------------------------------------------------------------
    def ping(self) -> None:
        """See :meth:`HotLog.ping`."""
        self._reader().execute("SELECT 1").fetchone()

    def close(self) -> None:
        """See :meth:`HotLog.close`."""
        if self._closed:
            return
        self._closed = True
        self._writes.close()
        self._stopped.set()
        self._wal_written.set()
        self._checkpointer.join()
        self._writer_conn.close()
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
