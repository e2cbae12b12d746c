"""The hot-log logic shared by the SQL stores: the statements, reads, appends and bookkeeping.

Both stores keep the same tables (:func:`schema_ddl`). A driver supplies only what differs: its
column types, how it gets a connection, runs a write transaction and serialises writers, its
parameter style (the statements here use ``?``), and the lookups its dialect writes differently.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Generic, TypeVar

import msgspec

from api.store._batch import copy_states, history_of, merge_into, next_ingest, touched_keys
from api.store.base import (
    AppendResult,
    HotLog,
    LogEntry,
    Page,
    RowKey,
    RowRecord,
    RulesRecord,
    decode_delta,
    decode_rules,
    decode_state,
    encode_delta,
    encode_rules,
    encode_state,
)
from lakesync.delta import RowDelta
from lakesync.merge import RowState
from lakesync.rules import SyncRules

__all__ = ["SqlHotLog", "schema_ddl"]

C = TypeVar("C")
T = TypeVar("T")

_DDL = """
CREATE TABLE IF NOT EXISTS log (
    ingest {integer} PRIMARY KEY, gw TEXT NOT NULL, delta_id TEXT NOT NULL,
    tbl TEXT NOT NULL, row_id TEXT NOT NULL, body {blob} NOT NULL, UNIQUE (gw, delta_id));
CREATE INDEX IF NOT EXISTS log_gw_ingest ON log (gw, ingest);
CREATE INDEX IF NOT EXISTS log_row ON log (gw, tbl, row_id, ingest);
CREATE TABLE IF NOT EXISTS row_state (
    gw TEXT NOT NULL, tbl TEXT NOT NULL, row_id TEXT NOT NULL, state {blob} NOT NULL,
    last_ingest {integer} NOT NULL, PRIMARY KEY (gw, tbl, row_id)){keyed};
CREATE TABLE IF NOT EXISTS gateway_rules (
    gw TEXT PRIMARY KEY, rules {blob}, stamp {integer} NOT NULL);
CREATE TABLE IF NOT EXISTS gateway_docs (
    gw TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, body {blob} NOT NULL,
    PRIMARY KEY (gw, kind, name)){keyed};
CREATE TABLE IF NOT EXISTS client_views (
    gw TEXT NOT NULL, client_id TEXT NOT NULL, claims_hash TEXT NOT NULL,
    stamp {integer} NOT NULL, PRIMARY KEY (gw, client_id)){keyed};
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value {integer} NOT NULL);
INSERT INTO counters VALUES ('flushed', 0), ('bytes', 0), ('flushed_bytes', 0), ('stamp', 0)
    ON CONFLICT DO NOTHING;
"""


def schema_ddl(integer: str, blob: str, keyed: str = "") -> str:
    """The store's tables (idempotent DDL) in a dialect: its 64-bit integer and byte-string
    types, and ``keyed``, the options of tables looked up only by their primary key."""
    return _DDL.format(integer=integer, blob=blob, keyed=keyed)


class SqlHotLog(HotLog, Generic[C]):
    """:class:`HotLog` over the shared SQL tables; ``C`` is the driver's connection type."""

    _for_update = ""
    """Suffix of a SELECT whose value the transaction then changes (a row lock where needed)."""

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
    def _fetch(self, conn: C, query: str, params: Sequence[Any] = ()) -> list[Any]:
        """The result rows of a ``?``-style query."""

    @abc.abstractmethod
    def _execute(self, conn: C, query: str, params: Sequence[Any] = ()) -> int:
        """Run a ``?``-style statement; the number of rows it changed."""

    @abc.abstractmethod
    def _execute_many(self, conn: C, query: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run a ``?``-style statement once per parameter row."""

    @abc.abstractmethod
    def _unstored(self, conn: C, gw: str, deltas: Sequence[RowDelta]) -> list[RowDelta]:
        """The deltas of a batch whose deltaId the gateway has not stored (each once, first
        occurrence kept), with :meth:`_lock` held when there are any."""

    @abc.abstractmethod
    def _rows(self, conn: C, gw: str, keys: Sequence[RowKey]) -> dict[RowKey, RowRecord]:
        """The stored state of the given rows (missing rows are left out)."""

    def _appended(self, conn: C, gw: str, after: int, upto: int) -> None:
        """Called inside an append's transaction once entries ``(after, upto]`` are stored."""

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

    # -- push -----------------------------------------------------------------------------------
    def append(self, gateway_id: str, deltas: Sequence[RowDelta]) -> AppendResult:
        """See :meth:`HotLog.append`."""
        batch = list(deltas)
        return self._write(lambda conn: self._append(conn, gateway_id, batch))

    def _append(self, conn: C, gw: str, deltas: list[RowDelta]) -> AppendResult:
        new = self._unstored(conn, gw, deltas)
        last = self._last(conn)
        if not new:
            return AppendResult([], len(deltas), last)
        first = next_ingest(self.clock, last)
        entries = [LogEntry(first + i, gw, d) for i, d in enumerate(new)]
        bodies = [encode_delta(e.delta) for e in entries]
        self._execute_many(
            conn,
            "INSERT INTO log (ingest, gw, delta_id, tbl, row_id, body) VALUES (?, ?, ?, ?, ?, ?)",
            [
                (e.ingest_hlc, gw, e.delta.delta_id, e.delta.table, e.delta.row_id, b)
                for e, b in zip(entries, bodies, strict=True)
            ],
        )
        self._execute(
            conn,
            "UPDATE counters SET value = value + ? WHERE name = 'bytes'",
            (sum(map(len, bodies)),),
        )
        keys = touched_keys(new)
        states = {k: r.state for k, r in self._rows(conn, gw, keys).items()}
        before = copy_states(states, keys)
        merge_into(states, new)
        last_ingest = {(e.delta.table, e.delta.row_id): e.ingest_hlc for e in entries}
        self._execute_many(
            conn,
            "INSERT INTO row_state (gw, tbl, row_id, state, last_ingest) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (gw, tbl, row_id)"
            " DO UPDATE SET state = excluded.state, last_ingest = excluded.last_ingest",
            [(gw, t, r, encode_state(states[(t, r)]), last_ingest[(t, r)]) for t, r in keys],
        )
        head = entries[-1].ingest_hlc
        self._appended(conn, gw, first - 1, head)
        rows = {k: RowRecord(states[k], last_ingest[k]) for k in keys}
        return AppendResult(entries, len(deltas), head, rows, before)

    # -- pull -----------------------------------------------------------------------------------
    def read_page(self, gateway_id: str, after: int, limit: int, with_rows: bool) -> Page:
        """See :meth:`HotLog.read_page`."""
        with self._snapshot() as conn:
            raw = self._fetch(
                conn,
                "SELECT ingest, body FROM log WHERE gw = ? AND ingest > ? ORDER BY ingest LIMIT ?",
                (gateway_id, after, limit + 1),
            )
            entries = [LogEntry(int(i), gateway_id, decode_delta(b)) for i, b in raw[:limit]]
            rows = (
                self._rows(conn, gateway_id, touched_keys([e.delta for e in entries]))
                if with_rows
                else {}
            )
            return Page(entries, rows, self._head(conn), len(raw) > limit)

    def read_range(self, gateway_id: str, after: int, upto: int) -> Page:
        """See :meth:`HotLog.read_range`."""
        with self._snapshot() as conn:
            raw = self._fetch(
                conn,
                "SELECT ingest, body FROM log WHERE gw = ? AND ingest > ? AND ingest <= ?"
                " ORDER BY ingest",
                (gateway_id, after, upto),
            )
            entries = [LogEntry(int(i), gateway_id, decode_delta(b)) for i, b in raw]
            rows = self._rows(conn, gateway_id, touched_keys([e.delta for e in entries]))
            return Page(entries, rows, self._head(conn), False)

    def read_all_rows(self, gateway_id: str) -> Page:
        """See :meth:`HotLog.read_all_rows`."""
        with self._snapshot() as conn:
            raw = self._fetch(
                conn,
                "SELECT tbl, row_id, state, last_ingest FROM row_state WHERE gw = ?"
                " ORDER BY tbl, row_id",
                (gateway_id,),
            )
            rows = {(t, r): RowRecord(decode_state(s), int(li)) for t, r, s, li in raw}
            return Page([], rows, self._head(conn), False)

    def read_rows(self, gateway_id: str, keys: Sequence[RowKey]) -> dict[RowKey, RowRecord]:
        """See :meth:`HotLog.read_rows`."""
        with self._connection() as conn:
            return self._rows(conn, gateway_id, keys)

    def row_history(
        self, gateway_id: str, keys: Sequence[RowKey], since: int, upto: int, max_deltas: int
    ) -> dict[RowKey, tuple[RowState, list[RowDelta]]]:
        """See :meth:`HotLog.row_history`."""
        out: dict[RowKey, tuple[RowState, list[RowDelta]]] = {}
        with self._snapshot() as conn:
            for t, r in keys:
                raw = self._fetch(
                    conn,
                    "SELECT ingest, body FROM log WHERE gw = ? AND tbl = ? AND row_id = ?"
                    " AND ingest <= ? ORDER BY ingest LIMIT ?",
                    (gateway_id, t, r, upto, max_deltas + 1),
                )
                if len(raw) <= max_deltas:
                    out[(t, r)] = history_of([(int(i), decode_delta(b)) for i, b in raw], since)
        return out

    def head(self) -> int:
        """See :meth:`HotLog.head`."""
        with self._connection() as conn:
            return self._head(conn)

    # -- flusher --------------------------------------------------------------------------------
    def read_log(self, after: int, limit: int) -> list[tuple[int, str, RowDelta]]:
        """See :meth:`HotLog.read_log`."""
        with self._connection() as conn:
            raw = self._fetch(
                conn,
                "SELECT ingest, gw, body FROM log WHERE ingest > ? ORDER BY ingest LIMIT ?",
                (after, limit),
            )
            return [(int(i), g, decode_delta(b)) for i, g, b in raw]

    def mark_flushed(self, position: int) -> None:
        """See :meth:`HotLog.mark_flushed`."""

        def op(conn: C) -> None:
            ((old,),) = self._fetch(
                conn, "SELECT value FROM counters WHERE name = 'flushed'" + self._for_update
            )
            if position <= old:
                return
            ((size,),) = self._fetch(
                conn,
                "SELECT coalesce(sum(length(body)), 0) FROM log WHERE ingest > ? AND ingest <= ?",
                (old, position),
            )
            self._execute(conn, "UPDATE counters SET value = ? WHERE name = 'flushed'", (position,))
            self._execute(
                conn,
                "UPDATE counters SET value = value + ? WHERE name = 'flushed_bytes'",
                (int(size),),
            )

        self._write(op)

    def flushed_position(self) -> int:
        """See :meth:`HotLog.flushed_position`."""
        with self._connection() as conn:
            return self._counter(conn, "flushed")

    def unflushed_bytes(self) -> int:
        """See :meth:`HotLog.unflushed_bytes`."""
        with self._connection() as conn:
            ((size,),) = self._fetch(
                conn,
                "SELECT (SELECT value FROM counters WHERE name = 'bytes')"
                " - (SELECT value FROM counters WHERE name = 'flushed_bytes')",
            )
            return int(size)

    # -- documents ------------------------------------------------------------------------------
    def get_rules(self, gateway_id: str) -> RulesRecord:
        """See :meth:`HotLog.get_rules`."""
        with self._connection() as conn:
            raw = self._fetch(
                conn, "SELECT rules, stamp FROM gateway_rules WHERE gw = ?", (gateway_id,)
            )
        return RulesRecord(decode_rules(raw[0][0]), int(raw[0][1])) if raw else RulesRecord(None, 0)

    def set_rules(self, gateway_id: str, rules: SyncRules | None) -> RulesRecord:
        """See :meth:`HotLog.set_rules`."""
        body = encode_rules(rules)

        def op(conn: C) -> RulesRecord:
            self._lock(conn)
            raw = self._fetch(
                conn, "SELECT rules, stamp FROM gateway_rules WHERE gw = ?", (gateway_id,)
            )
            if raw and raw[0][0] == body:
                return RulesRecord(rules, int(raw[0][1]))
            if not raw and body is None:
                return RulesRecord(None, 0)
            stamp = self._stamp(conn)
            self._execute(
                conn,
                "INSERT INTO gateway_rules (gw, rules, stamp) VALUES (?, ?, ?)"
                " ON CONFLICT (gw) DO UPDATE SET rules = excluded.rules, stamp = excluded.stamp",
                (gateway_id, body, stamp),
            )
            return RulesRecord(rules, stamp)

        return self._write(op)

    def put_doc(self, gateway_id: str, kind: str, name: str, body: dict[str, Any]) -> None:
        """See :meth:`HotLog.put_doc`."""
        raw = msgspec.json.encode(body)
        self._write(
            lambda conn: self._execute(
                conn,
                "INSERT INTO gateway_docs (gw, kind, name, body) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (gw, kind, name) DO UPDATE SET body = excluded.body",
                (gateway_id, kind, name, raw),
            )
        )

    def list_docs(self, gateway_id: str, kind: str) -> dict[str, dict[str, Any]]:
        """See :meth:`HotLog.list_docs`."""
        with self._connection() as conn:
            raw = self._fetch(
                conn,
                "SELECT name, body FROM gateway_docs WHERE gw = ? AND kind = ? ORDER BY name",
                (gateway_id, kind),
            )
            return {n: msgspec.json.decode(b) for n, b in raw}

    def docs_of_kind(self, kind: str) -> list[tuple[str, str, dict[str, Any]]]:
        """See :meth:`HotLog.docs_of_kind`."""
        with self._connection() as conn:
            raw = self._fetch(
                conn,
                "SELECT gw, name, body FROM gateway_docs WHERE kind = ? ORDER BY gw, name",
                (kind,),
            )
            return [(g, n, msgspec.json.decode(b)) for g, n, b in raw]

    def delete_doc(self, gateway_id: str, kind: str, name: str) -> bool:
        """See :meth:`HotLog.delete_doc`."""
        return self._write(
            lambda conn: (
                self._execute(
                    conn,
                    "DELETE FROM gateway_docs WHERE gw = ? AND kind = ? AND name = ?",
                    (gateway_id, kind, name),
                )
                > 0
            )
        )

    def view_stamp(self, gateway_id: str, client_id: str, claims_hash: str) -> int:
        """See :meth:`HotLog.view_stamp`."""
        with self._connection() as conn:
            seen = self._view(conn, gateway_id, client_id)
        if seen is not None and seen[0] == claims_hash:
            return seen[1]

        def op(conn: C) -> int:
            self._lock(conn)
            seen = self._view(conn, gateway_id, client_id)  # another writer may have been first
            if seen is not None and seen[0] == claims_hash:
                return seen[1]
            stamp = 0 if seen is None else self._stamp(conn)
            self._execute(
                conn,
                "INSERT INTO client_views (gw, client_id, claims_hash, stamp) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (gw, client_id)"
                " DO UPDATE SET claims_hash = excluded.claims_hash, stamp = excluded.stamp",
                (gateway_id, client_id, claims_hash, stamp),
            )
            return stamp

        return self._write(op)

    def _view(self, conn: C, gw: str, client_id: str) -> tuple[str, int] | None:
        """The recorded claims hash of a client and its stamp (None for a client never seen)."""
        raw = self._fetch(
            conn,
            "SELECT claims_hash, stamp FROM client_views WHERE gw = ? AND client_id = ?",
            (gw, client_id),
        )
        return (str(raw[0][0]), int(raw[0][1])) if raw else None
