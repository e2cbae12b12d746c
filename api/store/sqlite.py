"""The embedded hot log: one SQLite file in WAL mode with ``synchronous=FULL``.

Every write goes through a single writer thread that drains a queue of pending operations into
one transaction (group commit): concurrent pushes share one fsync, each push is isolated by a
savepoint so a failing batch rolls back alone, and a caller is answered only after the commit is
durable. Readers use their own per-thread connections and WAL snapshots, so they never block the
writer; because one writer assigns ingest HLCs in commit order, readers never see gaps.
"""

from __future__ import annotations

import concurrent.futures
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from api.store._batch import (
    copy_states,
    fresh_deltas,
    history_of,
    merge_into,
    next_ingest,
    touched_keys,
)
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
from lakesync.hlc import HLC
from lakesync.merge import RowState
from lakesync.rules import SyncRules

__all__ = ["SqliteHotLog"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS log (
    ingest INTEGER PRIMARY KEY, gw TEXT NOT NULL, delta_id TEXT NOT NULL,
    tbl TEXT NOT NULL, row_id TEXT NOT NULL, body BLOB NOT NULL, UNIQUE (gw, delta_id));
CREATE INDEX IF NOT EXISTS log_gw_ingest ON log (gw, ingest);
CREATE INDEX IF NOT EXISTS log_row ON log (gw, tbl, row_id, ingest);
CREATE TABLE IF NOT EXISTS row_state (
    gw TEXT NOT NULL, tbl TEXT NOT NULL, row_id TEXT NOT NULL, state BLOB NOT NULL,
    last_ingest INTEGER NOT NULL, PRIMARY KEY (gw, tbl, row_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gateway_rules (
    gw TEXT PRIMARY KEY, rules BLOB, stamp INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS gateway_docs (
    gw TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, body BLOB NOT NULL,
    PRIMARY KEY (gw, kind, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS client_views (
    gw TEXT NOT NULL, client_id TEXT NOT NULL, claims_hash TEXT NOT NULL, stamp INTEGER NOT NULL,
    PRIMARY KEY (gw, client_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counters VALUES ('flushed', 0), ('bytes', 0), ('flushed_bytes', 0),
    ('stamp', 0);
"""

_Op = Callable[[sqlite3.Connection], Any]
_STOP = object()
_MAX_GROUP = 256


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


class SqliteHotLog(HotLog):
    """The SQLite implementation of :class:`HotLog` (one process; see module docstring)."""

    def __init__(self, path: Path, clock: HLC) -> None:
        super().__init__(clock)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._writer_conn = _connect(path)
        self._writer_conn.executescript(_SCHEMA)
        row = self._writer_conn.execute(
            "SELECT max(coalesce((SELECT max(ingest) FROM log), 0),"
            " (SELECT value FROM counters WHERE name = 'stamp'))"
        ).fetchone()
        self._last = int(row[0])
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self.groups_committed = 0
        self._thread = threading.Thread(target=self._run_writer, name="hotlog-writer", daemon=True)
        self._thread.start()

    # -- writer ---------------------------------------------------------------------------------
    def _submit(self, op: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise RuntimeError("hot log is closed")
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._queue.put((op, fut))
        return fut.result()

    def _run_writer(self) -> None:
        conn = self._writer_conn
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            group = [first]
            while len(group) < _MAX_GROUP:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    self._queue.put(_STOP)
                    break
                group.append(item)
            self._commit_group(conn, group)

    def _commit_group(
        self, conn: sqlite3.Connection, group: list[tuple[_Op, concurrent.futures.Future[Any]]]
    ) -> None:
        last_before = self._last
        results: list[tuple[concurrent.futures.Future[Any], Any, BaseException | None]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for op, fut in group:
                conn.execute("SAVEPOINT op")
                mark = self._last
                try:
                    value = op(conn)
                except Exception as exc:  # the batch fails alone; the group goes on
                    conn.execute("ROLLBACK TO op")
                    conn.execute("RELEASE op")
                    self._last = mark
                    results.append((fut, None, exc))
                else:
                    conn.execute("RELEASE op")
                    results.append((fut, value, None))
            conn.execute("COMMIT")
            self.groups_committed += 1
        except Exception as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            self._last = last_before
            for _, fut in group:
                fut.set_exception(exc)
            return
        for fut, value, error in results:
            if error is None:
                fut.set_result(value)
            else:
                fut.set_exception(error)

    def _stamp(self, conn: sqlite3.Connection) -> int:
        """A fresh ingest HLC outside the log (rules and view changes), persisted as a floor."""
        stamp = next_ingest(self.clock, self._last)
        self._last = stamp
        conn.execute("UPDATE counters SET value = ? WHERE name = 'stamp'", (stamp,))
        return stamp

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

    # -- push -----------------------------------------------------------------------------------
    def append(self, gateway_id: str, deltas: Sequence[RowDelta]) -> AppendResult:
        """See :meth:`HotLog.append`."""
        batch = list(deltas)
        return self._submit(lambda conn: self._append(conn, gateway_id, batch))

    def _append(self, conn: sqlite3.Connection, gw: str, deltas: list[RowDelta]) -> AppendResult:
        known = _known_ids(conn, gw, [d.delta_id for d in deltas])
        new = fresh_deltas(deltas, known)
        if not new:
            return AppendResult([], len(deltas), self._last)
        first = next_ingest(self.clock, self._last)
        entries = [LogEntry(first + i, gw, d) for i, d in enumerate(new)]
        bodies = [encode_delta(e.delta) for e in entries]
        conn.executemany(
            "INSERT INTO log (ingest, gw, delta_id, tbl, row_id, body) VALUES (?, ?, ?, ?, ?, ?)",
            [
                (e.ingest_hlc, gw, e.delta.delta_id, e.delta.table, e.delta.row_id, b)
                for e, b in zip(entries, bodies, strict=True)
            ],
        )
        self._last = entries[-1].ingest_hlc
        conn.execute(
            "UPDATE counters SET value = value + ? WHERE name = 'bytes'", (sum(map(len, bodies)),)
        )
        keys = touched_keys(new)
        states = {k: r.state for k, r in _rows(conn, gw, keys).items()}
        before = copy_states(states, keys)
        merge_into(states, new)
        last_ingest = {(e.delta.table, e.delta.row_id): e.ingest_hlc for e in entries}
        conn.executemany(
            "INSERT OR REPLACE INTO row_state (gw, tbl, row_id, state, last_ingest)"
            " VALUES (?, ?, ?, ?, ?)",
            [(gw, t, r, encode_state(states[(t, r)]), last_ingest[(t, r)]) for t, r in keys],
        )
        rows = {k: RowRecord(states[k], last_ingest[k]) for k in keys}
        return AppendResult(entries, len(deltas), self._last, rows, before)

    # -- pull -----------------------------------------------------------------------------------
    def read_page(self, gateway_id: str, after: int, limit: int, with_rows: bool) -> Page:
        """See :meth:`HotLog.read_page`."""
        with self._snapshot() as conn:
            cur = conn.execute(
                "SELECT ingest, body FROM log WHERE gw = ? AND ingest > ? ORDER BY ingest LIMIT ?",
                (gateway_id, after, limit + 1),
            )
            raw = cur.fetchall()
            has_more = len(raw) > limit
            entries = [LogEntry(int(i), gateway_id, decode_delta(b)) for i, b in raw[:limit]]
            rows = (
                _rows(conn, gateway_id, touched_keys([e.delta for e in entries]))
                if with_rows
                else {}
            )
            return Page(entries, rows, _head(conn), has_more)

    def read_range(self, gateway_id: str, after: int, upto: int) -> Page:
        """See :meth:`HotLog.read_range`."""
        with self._snapshot() as conn:
            cur = conn.execute(
                "SELECT ingest, body FROM log WHERE gw = ? AND ingest > ? AND ingest <= ?"
                " ORDER BY ingest",
                (gateway_id, after, upto),
            )
            entries = [LogEntry(int(i), gateway_id, decode_delta(b)) for i, b in cur]
            rows = _rows(conn, gateway_id, touched_keys([e.delta for e in entries]))
            return Page(entries, rows, _head(conn), False)

    def read_all_rows(self, gateway_id: str) -> Page:
        """See :meth:`HotLog.read_all_rows`."""
        with self._snapshot() as conn:
            cur = conn.execute(
                "SELECT tbl, row_id, state, last_ingest FROM row_state WHERE gw = ?"
                " ORDER BY tbl, row_id",
                (gateway_id,),
            )
            rows = {(t, r): RowRecord(decode_state(s), int(li)) for t, r, s, li in cur}
            return Page([], rows, _head(conn), False)

    def read_rows(self, gateway_id: str, keys: Sequence[RowKey]) -> dict[RowKey, RowRecord]:
        """See :meth:`HotLog.read_rows`."""
        with self._snapshot() as conn:
            return _rows(conn, gateway_id, keys)

    def row_history(
        self, gateway_id: str, keys: Sequence[RowKey], since: int, upto: int, max_deltas: int
    ) -> dict[RowKey, tuple[RowState, list[RowDelta]]]:
        """See :meth:`HotLog.row_history`."""
        out: dict[RowKey, tuple[RowState, list[RowDelta]]] = {}
        with self._snapshot() as conn:
            for t, r in keys:
                raw = conn.execute(
                    "SELECT ingest, body FROM log WHERE gw = ? AND tbl = ? AND row_id = ?"
                    " AND ingest <= ? ORDER BY ingest LIMIT ?",
                    (gateway_id, t, r, upto, max_deltas + 1),
                ).fetchall()
                if len(raw) <= max_deltas:
                    out[(t, r)] = history_of([(int(i), decode_delta(b)) for i, b in raw], since)
        return out

    def head(self) -> int:
        """See :meth:`HotLog.head`."""
        with self._snapshot() as conn:
            return _head(conn)

    # -- flusher --------------------------------------------------------------------------------
    def read_log(self, after: int, limit: int) -> list[tuple[int, str, RowDelta]]:
        """See :meth:`HotLog.read_log`."""
        with self._snapshot() as conn:
            cur = conn.execute(
                "SELECT ingest, gw, body FROM log WHERE ingest > ? ORDER BY ingest LIMIT ?",
                (after, limit),
            )
            return [(int(i), g, decode_delta(b)) for i, g, b in cur]

    def mark_flushed(self, position: int) -> None:
        """See :meth:`HotLog.mark_flushed`."""

        def op(conn: sqlite3.Connection) -> None:
            old = _counter(conn, "flushed")
            if position <= old:
                return
            (size,) = conn.execute(
                "SELECT coalesce(sum(length(body)), 0) FROM log WHERE ingest > ? AND ingest <= ?",
                (old, position),
            ).fetchone()
            conn.execute("UPDATE counters SET value = ? WHERE name = 'flushed'", (position,))
            conn.execute(
                "UPDATE counters SET value = value + ? WHERE name = 'flushed_bytes'", (size,)
            )

        self._submit(op)

    def flushed_position(self) -> int:
        """See :meth:`HotLog.flushed_position`."""
        with self._snapshot() as conn:
            return _counter(conn, "flushed")

    def unflushed_bytes(self) -> int:
        """See :meth:`HotLog.unflushed_bytes`."""
        with self._snapshot() as conn:
            return _counter(conn, "bytes") - _counter(conn, "flushed_bytes")

    # -- documents ------------------------------------------------------------------------------
    def get_rules(self, gateway_id: str) -> RulesRecord:
        """See :meth:`HotLog.get_rules`."""
        with self._snapshot() as conn:
            row = conn.execute(
                "SELECT rules, stamp FROM gateway_rules WHERE gw = ?", (gateway_id,)
            ).fetchone()
        return RulesRecord(None, 0) if row is None else RulesRecord(decode_rules(row[0]), row[1])

    def set_rules(self, gateway_id: str, rules: SyncRules | None) -> RulesRecord:
        """See :meth:`HotLog.set_rules`."""
        body = encode_rules(rules)

        def op(conn: sqlite3.Connection) -> RulesRecord:
            row = conn.execute(
                "SELECT rules, stamp FROM gateway_rules WHERE gw = ?", (gateway_id,)
            ).fetchone()
            if row is not None and row[0] == body:
                return RulesRecord(rules, int(row[1]))
            if row is None and body is None:
                return RulesRecord(None, 0)
            stamp = self._stamp(conn)
            conn.execute(
                "INSERT OR REPLACE INTO gateway_rules (gw, rules, stamp) VALUES (?, ?, ?)",
                (gateway_id, body, stamp),
            )
            return RulesRecord(rules, stamp)

        return self._submit(op)

    def put_doc(self, gateway_id: str, kind: str, name: str, body: dict[str, Any]) -> None:
        """See :meth:`HotLog.put_doc`."""
        raw = msgspec.json.encode(body)
        self._submit(
            lambda conn: conn.execute(
                "INSERT OR REPLACE INTO gateway_docs (gw, kind, name, body) VALUES (?, ?, ?, ?)",
                (gateway_id, kind, name, raw),
            )
        )

    def list_docs(self, gateway_id: str, kind: str) -> dict[str, dict[str, Any]]:
        """See :meth:`HotLog.list_docs`."""
        with self._snapshot() as conn:
            cur = conn.execute(
                "SELECT name, body FROM gateway_docs WHERE gw = ? AND kind = ? ORDER BY name",
                (gateway_id, kind),
            )
            return {n: msgspec.json.decode(b) for n, b in cur}

    def docs_of_kind(self, kind: str) -> list[tuple[str, str, dict[str, Any]]]:
        """See :meth:`HotLog.docs_of_kind`."""
        with self._snapshot() as conn:
            cur = conn.execute(
                "SELECT gw, name, body FROM gateway_docs WHERE kind = ? ORDER BY gw, name", (kind,)
            )
            return [(g, n, msgspec.json.decode(b)) for g, n, b in cur]

    def delete_doc(self, gateway_id: str, kind: str, name: str) -> bool:
        """See :meth:`HotLog.delete_doc`."""
        return self._submit(
            lambda conn: (
                conn.execute(
                    "DELETE FROM gateway_docs WHERE gw = ? AND kind = ? AND name = ?",
                    (gateway_id, kind, name),
                ).rowcount
                > 0
            )
        )

    def view_stamp(self, gateway_id: str, client_id: str, claims_hash: str) -> int:
        """See :meth:`HotLog.view_stamp`."""
        with self._snapshot() as conn:
            row = conn.execute(
                "SELECT claims_hash, stamp FROM client_views WHERE gw = ? AND client_id = ?",
                (gateway_id, client_id),
            ).fetchone()
        if row is not None and row[0] == claims_hash:
            return int(row[1])

        def op(conn: sqlite3.Connection) -> int:
            cur = conn.execute(
                "SELECT claims_hash, stamp FROM client_views WHERE gw = ? AND client_id = ?",
                (gateway_id, client_id),
            ).fetchone()
            if cur is not None and cur[0] == claims_hash:
                return int(cur[1])
            stamp = 0 if cur is None else self._stamp(conn)
            conn.execute(
                "INSERT OR REPLACE INTO client_views (gw, client_id, claims_hash, stamp)"
                " VALUES (?, ?, ?, ?)",
                (gateway_id, client_id, claims_hash, stamp),
            )
            return stamp

        return self._submit(op)

    # -- lifecycle ------------------------------------------------------------------------------
    def ping(self) -> None:
        """See :meth:`HotLog.ping`."""
        self._reader().execute("SELECT 1").fetchone()

    def close(self) -> None:
        """See :meth:`HotLog.close`."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join()
        self._writer_conn.close()
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()


def _known_ids(conn: sqlite3.Connection, gw: str, ids: list[str]) -> set[str]:
    known: set[str] = set()
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        marks = ",".join("?" * len(chunk))
        cur = conn.execute(
            f"SELECT delta_id FROM log WHERE gw = ? AND delta_id IN ({marks})",
            (gw, *chunk),
        )
        known.update(r[0] for r in cur)
    return known


def _rows(conn: sqlite3.Connection, gw: str, keys: Sequence[RowKey]) -> dict[RowKey, RowRecord]:
    out: dict[RowKey, RowRecord] = {}
    for t, r in keys:
        row = conn.execute(
            "SELECT state, last_ingest FROM row_state WHERE gw = ? AND tbl = ? AND row_id = ?",
            (gw, t, r),
        ).fetchone()
        if row is not None:
            out[(t, r)] = RowRecord(decode_state(row[0]), int(row[1]))
    return out


def _head(conn: sqlite3.Connection) -> int:
    (head,) = conn.execute("SELECT coalesce(max(ingest), 0) FROM log").fetchone()
    return int(head)


def _counter(conn: sqlite3.Connection, name: str) -> int:
    (value,) = conn.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()
    return int(value)
