"""The local replica: one SQLite file holding user tables, cell clocks, outbox and cursors.

Layout (all bookkeeping tables start with ``_ls_``, which user tables may not):

- one table per synced table: ``row_id TEXT PRIMARY KEY`` plus one column per schema column,
  holding the *visible* merged row (what ``query()`` reads);
- ``_ls_rows``: per row the greatest write clock and the tombstone (greatest DELETE clock);
- ``_ls_cells``: per cell the winning value (JSON) and its ``(hlc, client_id)``;
- ``_ls_outbox``: local deltas not yet acknowledged by the gateway, in write order;
- ``_ls_dead_letters``: deltas the gateway refused for good;
- ``_ls_cursors``: per gateway the server ingest HLC pulled up to;
- ``_ls_schemas``: each table's schema and version; ``_ls_meta``: client id and last HLC.

Every method runs in one transaction: a local write commits its data, clocks, outbox entry and
the HLC together; a pulled page commits its rows with the cursor. The merge itself is the core's
:func:`lakesync.merge.apply_delta`; this module only loads and stores its states.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from client._columns import (
    SQL_TYPES,
    decode_json,
    encode_json,
    infer_type,
    register_converters,
    to_sql_value,
)
from client._decode import decode_outbox, encode_outbox
from client._types import Change, Origin
from client.errors import ClientClosedError, RowExistsError, RowNotFoundError, ValidationError
from lakesync.delta import Op, RowDelta, extract_delta, validate_row_id
from lakesync.errors import ClockDriftError, SchemaError
from lakesync.hlc import HLC
from lakesync.merge import Cell, Clock, RowState, apply_delta
from lakesync.schema import (
    ColumnSpec,
    TableSchema,
    check_delta,
    evolve,
    parse_schema,
    schema_to_wire,
)

__all__ = ["DeadLetter", "LocalStore", "OutboxEntry"]

_log = logging.getLogger(__name__)

_PREFIX = "_ls_"
_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1
# Row ids per IN (...) lookup; SQLite allows 32766 parameters, small chunks plan well.
_IN_CHUNK = 500

_DDL = """
CREATE TABLE IF NOT EXISTS _ls_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS _ls_schemas (
    tbl TEXT PRIMARY KEY, version INTEGER NOT NULL, spec TEXT NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS _ls_rows (
    tbl TEXT NOT NULL, row_id TEXT NOT NULL,
    write_hlc INTEGER, write_client TEXT, tomb_hlc INTEGER, tomb_client TEXT,
    PRIMARY KEY (tbl, row_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _ls_cells (
    tbl TEXT NOT NULL, row_id TEXT NOT NULL, col TEXT NOT NULL,
    value TEXT NOT NULL, hlc INTEGER NOT NULL, client_id TEXT NOT NULL,
    PRIMARY KEY (tbl, row_id, col)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _ls_outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, delta_id TEXT NOT NULL UNIQUE,
    body BLOB NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT);
CREATE TABLE IF NOT EXISTS _ls_dead_letters (
    seq INTEGER PRIMARY KEY, delta_id TEXT NOT NULL, body BLOB NOT NULL,
    code TEXT NOT NULL, error TEXT NOT NULL, failed_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS _ls_cursors (gateway_id TEXT PRIMARY KEY, server_hlc INTEGER NOT NULL);
"""

# Actions query() allows: reading only (sqlite3 authorizer action codes).
_READ_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, 33}  # 33 = RECURSIVE
)


def _hlc_in(ts: int) -> int:
    # SQLite integers are signed 64-bit; HLCs are unsigned. Only stored and compared in Python.
    return ts - _U64 if ts > _I64_MAX else ts


def _hlc_out(v: int) -> int:
    return v + _U64 if v < 0 else v


def _q(name: str) -> str:
    # Identifiers are validated against ^[a-zA-Z_][a-zA-Z0-9_]{0,63}$ before they get here.
    return f'"{name}"'


@dataclass(slots=True)
class _Touched:
    """A row changed inside one transaction: its state, visible before/after, written cells."""

    state: RowState
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    dirty: set[str]


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """A local delta waiting for the gateway's acknowledgement."""

    seq: int
    delta: RowDelta
    body: bytes
    attempts: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A local delta the gateway refused with a non-retryable error."""

    seq: int
    delta: RowDelta
    code: str
    error: str
    failed_at: float


class LocalStore:
    """The SQLite replica behind a client; thread-safe (one connection behind a lock)."""

    def __init__(self, path: str, schemas: Sequence[TableSchema] = ()) -> None:
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
        self._schemas: dict[str, TableSchema] = {}
        self._skipped: set[str] = set()
        with self._tx() as c:
            for tbl, spec in c.execute("SELECT tbl, spec FROM _ls_schemas").fetchall():
                self._schemas[tbl] = parse_schema(decode_json(spec))
            for schema in schemas:
                self._declare(c, schema)

    # -- plumbing -------------------------------------------------------------------------

    @property
    def conn(self) -> sqlite3.Connection:
        """The open connection; raises :class:`ClientClosedError` after :meth:`close`."""
        if self._conn is None:
            raise ClientClosedError("the client is closed")
        return self._conn

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
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
        with self._tx() as c:
            self._put_meta(c, key, value)

    @staticmethod
    def _put_meta(c: sqlite3.Connection, key: str, value: str) -> None:
        c.execute(
            "INSERT INTO _ls_meta (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    # -- schemas --------------------------------------------------------------------------

    def schema(self, table: str) -> TableSchema:
        """The schema of a local table; :class:`SchemaError` if the table is unknown."""
        try:
            return self._schemas[table]
        except KeyError:
            raise SchemaError(
                f"unknown table {table!r}: pass its schema to the client (schemas=[...])"
            ) from None

    def schemas(self) -> dict[str, TableSchema]:
        """Every local table's schema."""
        return dict(self._schemas)

    def schema_versions(self) -> dict[str, int]:
        """Each local table's schema version (1 on creation, +1 per added column)."""
        with self._lock:
            rows = self.conn.execute("SELECT tbl, version FROM _ls_schemas").fetchall()
        return {str(t): int(v) for t, v in rows}

    def declare(self, schema: TableSchema) -> None:
        """Create a table, or add the new columns of an additively evolved schema."""
        with self._tx() as c:
            self._declare(c, schema)

    def _declare(self, c: sqlite3.Connection, schema: TableSchema) -> None:
        if schema.table.startswith(_PREFIX):
            raise SchemaError(f"table names starting with {_PREFIX!r} are reserved by the client")
        old = self._schemas.get(schema.table)
        if old is None:
            clash = [t for t in self._schemas if t.lower() == schema.table.lower()]
            if clash:
                raise SchemaError(
                    f"table {schema.table!r} differs from local table {clash[0]!r} only in case; "
                    "SQLite table names are case-insensitive"
                )
            cols = ", ".join(f"{_q(s.name)} {SQL_TYPES[s.type]}" for s in schema.columns)
            c.execute(
                f"CREATE TABLE IF NOT EXISTS {_q(schema.table)} "
                f"(row_id TEXT PRIMARY KEY{', ' if cols else ''}{cols})"
            )
            self._store_schema(c, schema, 1)
            return
        # Columns learned from remote deltas stay even when the app's schema omits them.
        declared = {s.name for s in schema.columns}
        kept = [s for s in old.columns if s.name not in declared]
        merged = TableSchema(
            schema.table,
            [*schema.columns, *kept],
            schema.primary_key,
            schema.soft_delete,
            schema.external_id_column,
        )
        evolve(old, merged)
        added = [s for s in merged.columns if s.name not in old.column_types()]
        existing = {"row_id", *(name.lower() for name in old.column_types())}
        for spec in added:
            if spec.name.lower() in existing:
                raise SchemaError(
                    f"column {spec.name!r} of {schema.table!r} differs from an existing column "
                    "only in case; SQLite column names are case-insensitive"
                )
        if added or schema_to_wire(merged) != schema_to_wire(old):
            for s in added:
                c.execute(
                    f"ALTER TABLE {_q(schema.table)} ADD COLUMN {_q(s.name)} {SQL_TYPES[s.type]}"
                )
            version = c.execute(
                "SELECT version FROM _ls_schemas WHERE tbl = ?", (schema.table,)
            ).fetchone()[0]
            self._store_schema(c, merged, int(version) + 1)

    def _store_schema(self, c: sqlite3.Connection, schema: TableSchema, version: int) -> None:
        c.execute(
            "INSERT INTO _ls_schemas (tbl, version, spec, updated_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(tbl) DO UPDATE SET version = excluded.version, spec = excluded.spec, "
            "updated_at = excluded.updated_at",
            (schema.table, version, encode_json(schema_to_wire(schema)), time.time()),
        )
        self._schemas[schema.table] = schema

    def _learn(self, c: sqlite3.Connection, delta: RowDelta) -> bool:
        """Make room for a remote delta naming a table or columns this replica lacks.

        Returns False for a delta this replica cannot hold: a table whose name is reserved
        here or differs from a local table only in case (SQLite names are case-insensitive).
        A column that collides the same way keeps its clock and value in ``_ls_cells`` but
        gets no SQL column, so it never blocks the page.
        """
        old = self._schemas.get(delta.table)
        if old is None:
            folded = delta.table.lower()
            if folded.startswith(_PREFIX) or any(t.lower() == folded for t in self._schemas):
                if delta.table not in self._skipped:
                    self._skipped.add(delta.table)
                    _log.warning("ignoring remote table %r: its name is taken locally", delta.table)
                return False
        known = old.column_types() if old is not None else {}
        taken = {"row_id", *(name.lower() for name in known)}
        new_cols: list[ColumnSpec] = []
        for cv in delta.columns:
            if cv.column.lower() not in taken:
                taken.add(cv.column.lower())
                new_cols.append(ColumnSpec(cv.column, infer_type(cv.value)))
        if old is None:
            self._declare(c, TableSchema(delta.table, new_cols))
        elif new_cols:
            self._declare(
                c,
                TableSchema(
                    old.table,
                    [*old.columns, *new_cols],
                    old.primary_key,
                    old.soft_delete,
                    old.external_id_column,
                ),
            )
        return True

    # -- row states -----------------------------------------------------------------------

    def _load(
        self, c: sqlite3.Connection, keys: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], RowState]:
        """The merge states of many rows (empty states for rows never seen), a few queries."""
        by_table: dict[str, list[str]] = {}
        for table, row_id in keys:
            by_table.setdefault(table, []).append(row_id)
        states: dict[tuple[str, str], RowState] = {}
        for table, ids in by_table.items():
            for i in range(0, len(ids), _IN_CHUNK):
                chunk = ids[i : i + _IN_CHUNK]
                marks = ",".join("?" * len(chunk))
                found = 0
                for rid, wh, wc, th, tc in c.execute(
                    "SELECT row_id, write_hlc, write_client, tomb_hlc, tomb_client FROM _ls_rows "
                    f"WHERE tbl = ? AND row_id IN ({marks})",
                    (table, *chunk),
                ):
                    write: Clock | None = None if wh is None else (_hlc_out(wh), wc)
                    tomb: Clock | None = None if th is None else (_hlc_out(th), tc)
                    states[(table, rid)] = RowState({}, write, tomb)
                    found += 1
                if not found:  # a fresh replica skips the cell lookup entirely
                    continue
                for rid, col, value, h, cid in c.execute(
                    "SELECT row_id, col, value, hlc, client_id FROM _ls_cells "
                    f"WHERE tbl = ? AND row_id IN ({marks})",
                    (table, *chunk),
                ):
                    states[(table, rid)].cells[col] = Cell(decode_json(value), _hlc_out(h), cid)
            for rid in ids:
                states.setdefault((table, rid), RowState())
        return states

    def _save(self, c: sqlite3.Connection, touched: Mapping[tuple[str, str], _Touched]) -> None:
        """Write back merged states: clocks, won cells and the visible rows."""
        metas = []
        cells = []
        upserts: dict[str, list[tuple[Any, ...]]] = {}
        deletes: dict[str, list[tuple[str]]] = {}
        for (table, row_id), t in touched.items():
            w, tomb = t.state.write, t.state.tombstone
            metas.append(
                (
                    table,
                    row_id,
                    None if w is None else _hlc_in(w[0]),
                    None if w is None else w[1],
                    None if tomb is None else _hlc_in(tomb[0]),
                    None if tomb is None else tomb[1],
                )
            )
            for col in t.dirty:
                cell = t.state.cells.get(col)
                if cell is not None:
                    cells.append(
                        (
                            table,
                            row_id,
                            col,
                            encode_json(cell.value),
                            _hlc_in(cell.hlc),
                            cell.client_id,
                        )
                    )
            if t.after is None:
                if t.before is not None:
                    deletes.setdefault(table, []).append((row_id,))
                continue
            types = self._schemas[table].column_types()
            # The full row is rewritten so a revived row reads its pre-tombstone cells as null.
            upserts.setdefault(table, []).append(
                (row_id, *(to_sql_value(typ, t.after.get(n)) for n, typ in types.items()))
            )
        c.executemany("INSERT OR REPLACE INTO _ls_rows VALUES (?,?,?,?,?,?)", metas)
        c.executemany("INSERT OR REPLACE INTO _ls_cells VALUES (?,?,?,?,?,?)", cells)
        for table, rows in deletes.items():
            c.executemany(f"DELETE FROM {_q(table)} WHERE row_id = ?", rows)
        for table, rows in upserts.items():
            names = "".join(", " + _q(n) for n in self._schemas[table].column_types())
            marks = ", ".join("?" * len(rows[0]))
            c.executemany(
                f"INSERT OR REPLACE INTO {_q(table)} (row_id{names}) VALUES ({marks})", rows
            )

    def row_state(self, table: str, row_id: str) -> RowState:
        """The merge state of one row (empty if never seen)."""
        with self._lock:
            return self._load(self.conn, [(table, row_id)])[(table, row_id)]

    def get(self, table: str, row_id: str) -> dict[str, Any] | None:
        """The visible columns of one row, or None when it is absent."""
        return self.row_state(table, row_id).visible()

    # -- local writes ---------------------------------------------------------------------

    def write(
        self,
        op: Op | Literal["UPSERT"],
        table: str,
        row_id: str,
        values: Mapping[str, Any],
        clock: HLC,
        client_id: str,
    ) -> tuple[RowDelta, Change] | None:
        """Apply a local insert/update/upsert/delete and queue its delta, in one transaction.

        Returns the delta and the row change, or None for an update that changes nothing.
        Raises :class:`SchemaError` (unknown table/column, wrong type), :class:`RowExistsError`
        (insert of a live row), :class:`RowNotFoundError` (update/delete of an absent row).
        """
        schema = self.schema(table)
        validate_row_id(row_id, "row_id")
        if not isinstance(values, Mapping):
            raise ValidationError("values must be a mapping of column name to value")
        with self._tx() as c:
            state = self._load(c, [(table, row_id)])[(table, row_id)]
            before = state.visible()
            if op == "UPSERT":
                op = "INSERT" if before is None else "UPDATE"
            if op == "INSERT" and before is not None:
                raise RowExistsError(f"{table}/{row_id} already exists; use update()")
            if op != "INSERT" and before is None:
                raise RowNotFoundError(f"{table}/{row_id} does not exist in the local replica")
            ts = clock.now()
            delta: RowDelta | None
            if op == "UPDATE":
                assert before is not None
                after = {**before, **values}
                delta = extract_delta(
                    before, after, table=table, row_id=row_id, client_id=client_id, hlc=ts
                )
                if delta is None:
                    return None
            else:
                delta = RowDelta.create(op, table, row_id, client_id, values, ts)
            check_delta(schema, delta)
            change = apply_delta(state, delta)
            dirty = {cv.column for cv in delta.columns}
            self._save(c, {(table, row_id): _Touched(state, before, change.after, dirty)})
            c.execute(
                "INSERT INTO _ls_outbox (delta_id, body) VALUES (?, ?)",
                (delta.delta_id, encode_outbox(delta)),
            )
            self._put_meta(c, "hlc", str(clock.last))
        return delta, Change(table, row_id, change.before, change.after, "local")

    # -- remote deltas --------------------------------------------------------------------

    def apply_remote(
        self,
        deltas: Sequence[RowDelta],
        origin: Origin,
        clock: HLC,
        cursor: tuple[str, int] | None = None,
    ) -> list[Change]:
        """Merge remote deltas into the replica in one transaction, with the cursor if given.

        A delta never overwrites a cell holding a newer write and keeps every cell it wins;
        an INSERT of an existing row merges into it, an UPDATE of a deleted row revives it only
        if it beats the tombstone (SPEC §4). ``cursor`` is ``(gateway_id, server_hlc)``.
        """
        with self._tx() as c:
            deltas = [d for d in deltas if self._learn(c, d)]
            states = self._load(c, {(d.table, d.row_id) for d in deltas})
            touched: dict[tuple[str, str], _Touched] = {}
            for delta in deltas:
                key = (delta.table, delta.row_id)
                change = apply_delta(states[key], delta)
                t = touched.get(key)
                if t is None:
                    t = touched[key] = _Touched(states[key], change.before, change.after, set())
                t.after = change.after
                t.dirty.update(cv.column for cv in delta.columns)
            self._save(c, touched)
            changes = [
                Change(table, row_id, t.before, t.after, origin)
                for (table, row_id), t in touched.items()
                if t.before != t.after
            ]
            if cursor is not None:
                c.execute(
                    "INSERT INTO _ls_cursors (gateway_id, server_hlc) VALUES (?, ?) "
                    "ON CONFLICT(gateway_id) DO UPDATE SET server_hlc = excluded.server_hlc",
                    (cursor[0], _hlc_in(cursor[1])),
                )
            if deltas:
                self._observe(clock, max(d.hlc for d in deltas))
                self._put_meta(c, "hlc", str(clock.last))
        return changes

    @staticmethod
    def _observe(clock: HLC, remote: int) -> None:
        # Later local writes must sort after what this replica has seen; a remote clock too
        # far ahead is the gateway's problem to reject, not a reason to refuse the page.
        try:
            clock.recv(remote)
        except ClockDriftError:
            clock.now()

    def cursor(self, gateway_id: str) -> int:
        """The server ingest HLC this replica has pulled up to (0 = never pulled)."""
        with self._lock:
            row = self.conn.execute(
                "SELECT server_hlc FROM _ls_cursors WHERE gateway_id = ?", (gateway_id,)
            ).fetchone()
        return 0 if row is None else _hlc_out(int(row[0]))

    # -- outbox ---------------------------------------------------------------------------

    def outbox(self, limit: int, max_bytes: int) -> list[OutboxEntry]:
        """The oldest queued deltas: at most ``limit`` and ``max_bytes`` (at least one)."""
        out: list[OutboxEntry] = []
        size = 0
        with self._lock:
            rows = self.conn.execute(
                "SELECT seq, body, attempts FROM _ls_outbox ORDER BY seq LIMIT ?", (limit,)
            ).fetchall()
        for seq, body, attempts in rows:
            raw = bytes(body)
            if out and size + len(raw) > max_bytes:
                break
            size += len(raw)
            out.append(OutboxEntry(int(seq), decode_outbox(raw), raw, int(attempts)))
        return out

    def ack(self, seqs: Sequence[int]) -> None:
        """Remove acknowledged entries from the outbox."""
        with self._tx() as c:
            c.executemany("DELETE FROM _ls_outbox WHERE seq = ?", [(s,) for s in seqs])

    def record_failure(self, seqs: Sequence[int], error: str) -> None:
        """Count a failed attempt on outbox entries (kept for the next cycle)."""
        with self._tx() as c:
            c.executemany(
                "UPDATE _ls_outbox SET attempts = attempts + 1, last_error = ? WHERE seq = ?",
                [(error, s) for s in seqs],
            )

    def dead_letter(self, entry: OutboxEntry, code: str, error: str) -> None:
        """Move an entry the gateway refused for good from the outbox to the dead letters."""
        with self._tx() as c:
            c.execute(
                "INSERT OR REPLACE INTO _ls_dead_letters VALUES (?, ?, ?, ?, ?, ?)",
                (entry.seq, entry.delta.delta_id, entry.body, code, error, time.time()),
            )
            c.execute("DELETE FROM _ls_outbox WHERE seq = ?", (entry.seq,))

    def dead_letters(self) -> list[DeadLetter]:
        """Every dead-lettered delta, oldest first."""
        with self._lock:
            rows = self.conn.execute(
                "SELECT seq, body, code, error, failed_at FROM _ls_dead_letters ORDER BY seq"
            ).fetchall()
        return [
            DeadLetter(int(s), decode_outbox(bytes(b)), c, e, float(f)) for s, b, c, e, f in rows
        ]

    def requeue_dead_letters(self) -> int:
        """Put every dead-lettered delta back in the outbox (after fixing the cause)."""
        with self._tx() as c:
            n = c.execute(
                "INSERT OR IGNORE INTO _ls_outbox (seq, delta_id, body) "
                "SELECT seq, delta_id, body FROM _ls_dead_letters"
            ).rowcount
            c.execute("DELETE FROM _ls_dead_letters")
        return int(n)

    def queue_depth(self) -> int:
        """How many local deltas wait for the gateway."""
        with self._lock:
            return int(self.conn.execute("SELECT count(*) FROM _ls_outbox").fetchone()[0])

    def dead_letter_count(self) -> int:
        """How many deltas were dead-lettered."""
        with self._lock:
            return int(self.conn.execute("SELECT count(*) FROM _ls_dead_letters").fetchone()[0])

    # -- reads ----------------------------------------------------------------------------

    def query(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[dict[str, Any]]:
        """Run a read-only SQL statement; rows as dicts with values decoded to JSON types."""
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

        with self._lock:
            conn = self.conn
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


def _bind(params: Sequence[Any] | Mapping[str, Any]) -> Sequence[Any] | Mapping[str, Any]:
    # Bind JSON-typed parameters the way the columns store them (dicts/lists as JSON text).
    if isinstance(params, Mapping):
        return {k: encode_json(v) if isinstance(v, dict | list) else v for k, v in params.items()}
    return [encode_json(v) if isinstance(v, dict | list) else v for v in params]
