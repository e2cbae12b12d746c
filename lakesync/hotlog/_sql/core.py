"""The ground every SQL store module stands on: the tables, the driver's hooks and the reads and
stamps several ports share.

Both stores keep the same tables (:func:`schema_ddl`). A driver supplies only what differs: its
column types, how it gets a connection, runs a write transaction and serialises writers, its
parameter style (the statements here use ``?``), and the lookups its dialect writes differently.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Generic, TypeVar

from sqlglot import exp

from lakesync.hlc import HLC
from lakesync.hotlog._batch import next_ingest
from lakesync.hotlog.base import RowKey, RowRecord, decode_delta, decode_state
from lakesync.merge import RowState
from lakesync.rules import SyncRules
from lakesync.sql_ast import ident
from lakesync.sql_ast import table as sql_table

__all__ = [
    "ADDED_COLUMNS",
    "AFTER_COLUMNS_DDL",
    "LOG_COLUMNS",
    "C",
    "SqlCore",
    "hlc_column",
    "schema_ddl",
]

C = TypeVar("C")
T = TypeVar("T")

_DDL = """
CREATE TABLE IF NOT EXISTS log (
    ingest {integer} PRIMARY KEY, gw TEXT NOT NULL, delta_id TEXT NOT NULL,
    tbl TEXT NOT NULL, row_id TEXT NOT NULL, body {blob} NOT NULL, batch_end {integer},
    client_id TEXT, hlc {integer});
CREATE INDEX IF NOT EXISTS log_gw_ingest ON log (gw, ingest);
CREATE INDEX IF NOT EXISTS log_row ON log (gw, tbl, row_id, ingest);
CREATE TABLE IF NOT EXISTS row_state (
    gw TEXT NOT NULL, tbl TEXT NOT NULL, row_id TEXT NOT NULL, state {blob} NOT NULL,
    last_ingest {integer} NOT NULL, PRIMARY KEY (gw, tbl, row_id)){keyed};
CREATE TABLE IF NOT EXISTS gateway_rules (
    gw TEXT PRIMARY KEY, rules {blob}, stamp {integer} NOT NULL);
CREATE TABLE IF NOT EXISTS row_index (
    gw TEXT NOT NULL, col TEXT NOT NULL, val TEXT NOT NULL, tbl TEXT NOT NULL,
    row_id TEXT NOT NULL, PRIMARY KEY (gw, col, val, tbl, row_id)){keyed};
CREATE INDEX IF NOT EXISTS row_index_row ON row_index (gw, tbl, row_id);
CREATE TABLE IF NOT EXISTS row_index_built (gw TEXT PRIMARY KEY, stamp {integer} NOT NULL);
CREATE TABLE IF NOT EXISTS gateway_docs (
    gw TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, body {blob} NOT NULL,
    PRIMARY KEY (gw, kind, name)){keyed};
CREATE TABLE IF NOT EXISTS rules_history (
    gw TEXT NOT NULL, stamp {integer} NOT NULL, rules {blob},
    PRIMARY KEY (gw, stamp)){keyed};
CREATE TABLE IF NOT EXISTS claims_history (
    gw TEXT NOT NULL, client_id TEXT NOT NULL, stamp {integer} NOT NULL, claims {blob} NOT NULL,
    PRIMARY KEY (gw, client_id, stamp)){keyed};
CREATE TABLE IF NOT EXISTS client_views (
    gw TEXT NOT NULL, client_id TEXT NOT NULL, claims_hash TEXT NOT NULL,
    stamp {integer} NOT NULL, PRIMARY KEY (gw, client_id)){keyed};
CREATE TABLE IF NOT EXISTS checkpoints (
    gw TEXT PRIMARY KEY, upto {integer} NOT NULL, chunks {integer} NOT NULL,
    row_count {integer} NOT NULL, previous {integer}, trimmed {integer} NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoint_chunks (
    gw TEXT NOT NULL, upto {integer} NOT NULL, seq {integer} NOT NULL, body {blob} NOT NULL,
    PRIMARY KEY (gw, upto, seq)){keyed};
CREATE TABLE IF NOT EXISTS trimmed_rows (
    gw TEXT NOT NULL, tbl TEXT NOT NULL, row_id TEXT NOT NULL, state {blob} NOT NULL,
    PRIMARY KEY (gw, tbl, row_id)){keyed};
CREATE TABLE IF NOT EXISTS trimmed_writers (
    gw TEXT NOT NULL, client_id TEXT NOT NULL, tbl TEXT NOT NULL, row_id TEXT NOT NULL,
    PRIMARY KEY (gw, client_id, tbl, row_id)){keyed};
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value {integer} NOT NULL);
INSERT INTO counters VALUES ('flushed', 0), ('bytes', 0), ('flushed_bytes', 0), ('stamp', 0)
    ON CONFLICT DO NOTHING;
"""


ADDED_COLUMNS = (
    ("log", "batch_end", "{integer}"),
    ("log", "client_id", "TEXT"),
    ("log", "hlc", "{integer}"),
)
"""Columns added to a table after its first release: ``(table, column, type)``; a driver adds the
missing ones to an existing store when it opens it, runs :data:`AFTER_COLUMNS_DDL`, then
:meth:`SqlCore.fill_added_columns`."""



def add_column(table: str, column: str, typ: str, *, integer: str, dialect: str) -> str:
    """The ``ALTER TABLE`` adding one of :data:`ADDED_COLUMNS` in ``dialect`` (``sqlite`` or
    ``postgres``, which adds it only if missing), ``{integer}`` typed as ``integer``."""
    definition = exp.ColumnDef(
        this=ident(column),
        kind=exp.DataType(this=exp.DataType.Type.USERDEFINED, kind=typ.format(integer=integer)),
        exists=dialect == "postgres",
    )
    return exp.Alter(this=sql_table(table), kind="TABLE", actions=[definition]).sql(dialect=dialect)


def table_info(table: str) -> str:
    """SQLite's ``PRAGMA table_info`` of ``table`` (its columns)."""
    return exp.Pragma(
        this=exp.Anonymous(this="table_info", expressions=[exp.Literal.string(table)])
    ).sql(dialect="sqlite")


AFTER_COLUMNS_DDL = (
    # Deduplication finds a stored deltaId by its client id and HLC (both part of the deltaId):
    # a client's HLCs grow, so each push appends to this index where an index on the random
    # deltaId (a store created before it, which keeps its UNIQUE constraint) touched a page
    # per delta. It also serves rows_written_by.
    "CREATE INDEX IF NOT EXISTS log_client_hlc ON log (gw, client_id, hlc)",
    # Entries stored before the hlc column existed, until fill_added_columns has filled them.
    "CREATE INDEX IF NOT EXISTS log_unfilled ON log (ingest) WHERE hlc IS NULL",
)
"""Indexes on added columns (they exist once :data:`ADDED_COLUMNS` are added)."""

LOG_COLUMNS = "ingest, gw, delta_id, tbl, row_id, body, batch_end, client_id, hlc"
"""The columns of a log row as ``SqlDeltaLog._insert_log`` (:mod:`.log`) receives them."""

_MAX_HLC_COLUMN = 2**63 - 1

_IN_CHUNK = 500
"""Row ids per ``IN`` list of a look-up by key."""


def hlc_column(hlc: int) -> int:
    """A client HLC as the log's signed 64-bit ``hlc`` column holds it. Only a key to look a
    deltaId up by, so the clamp of an HLC no gateway accepts (beyond 2^63) loses nothing."""
    return min(hlc, _MAX_HLC_COLUMN)


def schema_ddl(integer: str, blob: str, keyed: str = "") -> str:
    """The store's tables (idempotent DDL) in a dialect: its 64-bit integer and byte-string
    types, and ``keyed``, the options of tables looked up only by their primary key."""
    return _DDL.format(integer=integer, blob=blob, keyed=keyed)


class SqlCore(Generic[C], metaclass=abc.ABCMeta):
    """What the SQL ports share; ``C`` is the driver's connection type."""

    clock: HLC

    _for_update = ""
    """Suffix of a SELECT whose value the transaction then changes (a row lock where needed)."""

    def __init__(self, clock: HLC) -> None:
        # The one __init__ of a SQL store (first in its MRO; HotLog's sets the clock alone).
        self.clock = clock
        # Parsed rules by stored body, for the rules index (:mod:`.index`).
        self._rules_memo: dict[bytes | str, SyncRules | None] = {}

    # -- driver hooks ---------------------------------------------------------------------------
    @abc.abstractmethod
    def _snapshot(self) -> AbstractContextManager[C]:
        """A connection in a read-only transaction: one consistent view for several statements."""

    def _connection(self) -> AbstractContextManager[C]:
        """A connection for a read of one statement or of :meth:`_rows` (a driver whose connection
        here is no snapshot reads its rows in one statement); a snapshot by default."""
        return self._snapshot()

    @abc.abstractmethod
    def _write(self, op: Callable[[C], T]) -> T:
        """Run ``op`` in a write transaction and return its result once the commit is durable;
        when ``op`` raises, its writes are rolled back and the error is raised here."""

    @abc.abstractmethod
    def _lock(self, conn: C) -> None:
        """Serialise the rest of this write transaction with every other writer of the log and
        of ingest stamps."""

    @abc.abstractmethod
    def _fetch(
        self, conn: C, query: str, params: Sequence[Any] = (), *, binary: bool = False
    ) -> list[Any]:
        """The result rows of a ``?``-style query; ``binary`` asks a driver with a text and a
        binary result format for the binary one (large blobs: no hex to encode and parse)."""

    @abc.abstractmethod
    def _execute(self, conn: C, query: str, params: Sequence[Any] = ()) -> int:
        """Run a ``?``-style statement; the number of rows it changed."""

    @abc.abstractmethod
    def _execute_many(self, conn: C, query: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run a ``?``-style statement once per parameter row."""

    @abc.abstractmethod
    def _rows(self, conn: C, gw: str, keys: Sequence[RowKey]) -> dict[RowKey, RowRecord]:
        """The stored state of the given rows (missing rows are left out)."""

    @abc.abstractmethod
    def _relation(
        self, conn: C, gw: str, table: str, lookups: Sequence[tuple[str, Sequence[str]]] | None
    ) -> dict[RowKey, RowState]:
        """The rows of ``table`` a write check's subqueries read (``HotLog.read_relation``)."""

    def fill_added_columns(self, conn: C) -> None:
        """Fill the client id and HLC of log entries stored before those columns existed (from
        their bodies), in a write transaction; a store opened before does nothing here."""
        while True:
            raw = self._fetch(
                conn, "SELECT ingest, body FROM log WHERE hlc IS NULL ORDER BY ingest LIMIT 5000"
            )
            if not raw:
                return
            self._execute_many(
                conn,
                "UPDATE log SET client_id = ?, hlc = ? WHERE ingest = ?",
                [
                    (d.client_id, hlc_column(d.hlc), int(i))
                    for i, d in ((i, decode_delta(b)) for i, b in raw)
                ],
            )

    # -- shared statements ----------------------------------------------------------------------
    def _head(self, conn: C) -> int:
        return int(self._fetch(conn, "SELECT coalesce(max(ingest), 0) FROM log")[0][0])

    def _last(self, conn: C) -> int:
        """The greatest ingest HLC handed out: the log's head or a later rules/view stamp."""
        (row,) = self._fetch(
            conn,
            "SELECT max(v) FROM (SELECT max(ingest) AS v FROM log"
            " UNION ALL SELECT value FROM counters WHERE name = 'stamp') AS last",
        )
        return int(row[0])

    def _counter(self, conn: C, name: str) -> int:
        return int(self._fetch(conn, "SELECT value FROM counters WHERE name = ?", (name,))[0][0])

    def _stamp(self, conn: C) -> int:
        """A fresh ingest HLC outside the log (rules and view changes), persisted as a floor."""
        self._lock(conn)
        stamp = next_ingest(self.clock, self._last(conn))
        self._execute(conn, "UPDATE counters SET value = ? WHERE name = 'stamp'", (stamp,))
        return stamp

    def _by_keys(
        self, conn: C, query: str, params: Sequence[Any], keys: Sequence[RowKey]
    ) -> list[Any]:
        """The rows of ``query`` (its conditions end with ``AND tbl = ? AND row_id IN``, the
        list left out; ``params`` are those before ``tbl``) for each table of ``keys`` and
        chunk of its row ids."""
        by_table: dict[str, list[str]] = {}
        for t, r in keys:
            by_table.setdefault(t, []).append(r)
        out: list[Any] = []
        for t, ids in by_table.items():
            for i in range(0, len(ids), _IN_CHUNK):
                chunk = ids[i : i + _IN_CHUNK]
                marks = ",".join("?" * len(chunk))
                out.extend(self._fetch(conn, f"{query} ({marks})", (*params, t, *chunk)))
        return out

    def _trimmed_states(self, conn: C, gw: str, keys: Sequence[RowKey]) -> dict[RowKey, RowState]:
        """Per row of ``keys``: the state merged from its trimmed deltas (rows without any are
        left out)."""
        raw = self._by_keys(
            conn,
            "SELECT tbl, row_id, state FROM trimmed_rows WHERE gw = ? AND tbl = ? AND row_id IN",
            (gw,),
            keys,
        )
        return {(str(t), str(r)): decode_state(st) for t, r, st in raw}
