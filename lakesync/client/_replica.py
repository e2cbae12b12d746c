"""The replica's SQLite file: connection, transactions, layout (see :mod:`lakesync.client._store`)
and small settings."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import chain
from typing import Any

from lakesync.client._columns import decode_json, register_converters
from lakesync.client._sql import insert_rows
from lakesync.client.errors import ClientClosedError
from lakesync.merge import Cell, RowState, encode_row_state_binary
from lakesync.wire import decode_delta

_PREFIX = "_ls_"
_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1
# Row ids per IN (...) lookup; SQLite allows 32766 parameters, small chunks plan well.
_IN_CHUNK = 500

_ROWS_COLUMNS = ("tbl", "row_id", "state", "view_base")
_ROWS_DDL = """CREATE TABLE IF NOT EXISTS _ls_rows (
    tbl TEXT NOT NULL, row_id TEXT NOT NULL, state BLOB NOT NULL, view_base INTEGER,
    PRIMARY KEY (tbl, row_id)) WITHOUT ROWID"""
# ``_ls_rows`` once kept a row's clocks in columns and each cell in a row of ``_ls_cells``
# (five SQLite rows per synced row); :meth:`ReplicaFile._migrate` folds such a replica into
# this layout when it is opened.
_DDL = (
    """
CREATE TABLE IF NOT EXISTS _ls_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS _ls_schemas (
    tbl TEXT PRIMARY KEY, version INTEGER NOT NULL, spec TEXT NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS _ls_outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, delta_id TEXT NOT NULL UNIQUE,
    body BLOB NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT,
    tbl TEXT, row_id TEXT, acked INTEGER);
CREATE TABLE IF NOT EXISTS _ls_dead_letters (
    seq INTEGER PRIMARY KEY, delta_id TEXT NOT NULL, body BLOB NOT NULL,
    code TEXT NOT NULL, error TEXT NOT NULL, failed_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS _ls_cursors (gateway_id TEXT PRIMARY KEY, server_hlc INTEGER NOT NULL);
"""
    + _ROWS_DDL
    + ";"
)


# Rows per multi-row INSERT: binding a statement of many rows costs SQLite and the sqlite3
# module about a third less per row than executemany's step per row (measured on a first sync).
_ROWS_PER_INSERT = 100


def _insert_rows(
    c: sqlite3.Connection,
    table: str,
    columns: tuple[str, ...],
    rows: Sequence[tuple[Any, ...]],
    *,
    replace: bool = False,
) -> None:
    """Insert (or replace) ``rows`` (tuples of ``columns``) into ``table`` as a few multi-row
    statements, in order (a later row replaces an earlier one as executemany would)."""
    if not rows:
        return
    width = len(columns)
    per = max(1, min(_ROWS_PER_INSERT, c.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // width))
    for i in range(0, len(rows), per):
        part = rows[i : i + per]
        c.execute(
            insert_rows(table, columns, len(part), replace=replace),
            list(chain.from_iterable(part)),
        )


def _hlc_in(ts: int) -> int:
    # SQLite integers are signed 64-bit; HLCs are unsigned. Only stored and compared in Python.
    return ts - _U64 if ts > _I64_MAX else ts


def _hlc_out(v: int) -> int:
    return v + _U64 if v < 0 else v


class ReplicaFile:
    """One SQLite connection behind a lock, in the replica's layout; thread-safe."""

    def __init__(self, path: str) -> None:
        register_converters()
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = sqlite3.connect(
            path,
            detect_types=sqlite3.PARSE_DECLTYPES,
            check_same_thread=False,
            isolation_level=None,
        )
        conn = self._conn
        if path != ":memory:" and not path.startswith("file::memory:"):
            conn.execute("PRAGMA journal_mode=WAL")
        # WAL + NORMAL survives a killed process (the acceptance crash); FULL would add an fsync
        # per write for power-loss durability.
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=10000")
        conn.executescript(_DDL)
        self._migrate(conn)

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        """Bring a replica written by an earlier layout to this one (each step is idempotent)."""
        if "state" not in {row[1] for row in conn.execute("PRAGMA table_info(_ls_rows)")}:
            ReplicaFile._fold_cells(conn)
        cols = {row[1] for row in conn.execute("PRAGMA table_info(_ls_outbox)")}
        if "tbl" not in cols:
            conn.execute("ALTER TABLE _ls_outbox ADD COLUMN tbl TEXT")
            conn.execute("ALTER TABLE _ls_outbox ADD COLUMN row_id TEXT")
            conn.execute("ALTER TABLE _ls_outbox ADD COLUMN acked INTEGER")
            for seq, body in conn.execute("SELECT seq, body FROM _ls_outbox").fetchall():
                d = decode_delta(bytes(body))
                conn.execute(
                    "UPDATE _ls_outbox SET tbl = ?, row_id = ? WHERE seq = ?",
                    (d.table, d.row_id, seq),
                )
        conn.execute("CREATE INDEX IF NOT EXISTS _ls_outbox_row ON _ls_outbox (tbl, row_id)")

    @staticmethod
    def _fold_cells(conn: sqlite3.Connection) -> None:
        """Rewrite the per-column layout of ``_ls_rows`` (clock columns, cells in ``_ls_cells``)
        as one encoded :class:`RowState` per row, in one transaction."""
        cols = {row[1] for row in conn.execute("PRAGMA table_info(_ls_rows)")}
        base = "view_base" if "view_base" in cols else "NULL"
        conn.execute("BEGIN IMMEDIATE")
        try:
            states: dict[tuple[str, str], tuple[RowState, int | None]] = {}
            for t, r, wh, wc, th, tc, vb in conn.execute(
                "SELECT tbl, row_id, write_hlc, write_client, tomb_hlc, tomb_client,"
                f" {base} FROM _ls_rows"
            ):
                write = None if wh is None else (_hlc_out(wh), wc)
                tomb = None if th is None else (_hlc_out(th), tc)
                states[(t, r)] = (RowState({}, write, tomb), vb)
            for t, r, col, value, h, cid in conn.execute(
                "SELECT tbl, row_id, col, value, hlc, client_id FROM _ls_cells"
            ):
                found = states.get((t, r))
                if found is not None:
                    found[0].cells[col] = Cell(decode_json(value), _hlc_out(h), cid)
            conn.execute("DROP TABLE _ls_rows")
            conn.execute("DROP TABLE _ls_cells")
            conn.execute(_ROWS_DDL)
            _insert_rows(
                conn,
                "_ls_rows",
                _ROWS_COLUMNS,
                [(t, r, encode_row_state_binary(st), vb) for (t, r), (st, vb) in states.items()],
            )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    # -- plumbing -------------------------------------------------------------------------

    @property
    def conn(self) -> sqlite3.Connection:
        """The open connection; raises :class:`ClientClosedError` after :meth:`close`."""
        if self._conn is None:
            raise ClientClosedError("the client is closed")
        return self._conn

    @property
    def lock(self) -> threading.RLock:
        """The lock every transaction holds: what is done under it never interleaves with a
        commit (watches register under it, see :class:`lakesync.client._watch.Watchers`)."""
        return self._lock

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One transaction (``BEGIN IMMEDIATE``) under the lock; rolled back on an error."""
        with self._lock:
            conn = self.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._conn is None

    # -- meta -----------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        """A stored setting (client id, last HLC), or None."""
        with self._lock:
            row = self.conn.execute("SELECT value FROM _ls_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        """Store a setting."""
        with self.tx() as c:
            self.put_meta(c, key, value)

    @staticmethod
    def put_meta(c: sqlite3.Connection, key: str, value: str) -> None:
        """Store a setting in the transaction ``c``."""
        c.execute(
            "INSERT INTO _ls_meta (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )
