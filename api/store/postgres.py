"""The shared hot log on PostgreSQL (psycopg 3 + pool), for several gateway processes.

Appends are serialised per store with a transaction-scoped advisory lock; the ingest HLCs are
assigned inside the lock from ``max(HLC.now(), last stored + 1)``, and the lock is released only
after the commit is visible, so ingest order equals commit order and readers never see a gap.
Each append sends a ``NOTIFY`` (delivered on commit) that the other processes turn into
WebSocket broadcasts.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import msgspec
import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

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
    LogNotice,
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

__all__ = ["PostgresHotLog"]

_CHANNEL = "lakesync_hotlog"

_DDL = """
CREATE TABLE IF NOT EXISTS log (
    ingest BIGINT PRIMARY KEY, gw TEXT NOT NULL, delta_id TEXT NOT NULL,
    tbl TEXT NOT NULL, row_id TEXT NOT NULL, body BYTEA NOT NULL, UNIQUE (gw, delta_id));
CREATE INDEX IF NOT EXISTS log_gw_ingest ON log (gw, ingest);
CREATE INDEX IF NOT EXISTS log_row ON log (gw, tbl, row_id, ingest);
CREATE TABLE IF NOT EXISTS row_state (
    gw TEXT NOT NULL, tbl TEXT NOT NULL, row_id TEXT NOT NULL, state BYTEA NOT NULL,
    last_ingest BIGINT NOT NULL, PRIMARY KEY (gw, tbl, row_id));
CREATE TABLE IF NOT EXISTS gateway_rules (gw TEXT PRIMARY KEY, rules BYTEA, stamp BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS gateway_docs (
    gw TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, body BYTEA NOT NULL,
    PRIMARY KEY (gw, kind, name));
CREATE TABLE IF NOT EXISTS client_views (
    gw TEXT NOT NULL, client_id TEXT NOT NULL, claims_hash TEXT NOT NULL, stamp BIGINT NOT NULL,
    PRIMARY KEY (gw, client_id));
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
INSERT INTO counters VALUES ('flushed', 0), ('bytes', 0), ('flushed_bytes', 0), ('stamp', 0)
    ON CONFLICT DO NOTHING;
"""


class PostgresHotLog(HotLog):
    """The PostgreSQL implementation of :class:`HotLog` (see module docstring)."""

    def __init__(self, dsn: str, clock: HLC, schema: str = "lakesync", pool_size: int = 8) -> None:
        super().__init__(clock)
        self._dsn = dsn
        self._schema = schema
        self.origin = uuid.uuid4().hex
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_advisory_lock(hashtext('lakesync-ddl'))")
            try:
                ident = sql.Identifier(schema)
                conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
                conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
                conn.execute(_DDL)
            finally:
                conn.execute("SELECT pg_advisory_unlock(hashtext('lakesync-ddl'))")
        self._pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            configure=self._configure,
            open=True,
            name=f"hotlog-{schema}",
        )
        self._listeners: list[threading.Thread] = []
        self._stop = threading.Event()

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        # Autocommit: every transaction below is explicit (conn.transaction() or _read()).
        conn.autocommit = True
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self._schema)))

    @contextmanager
    def _read(self) -> Iterator[psycopg.Connection[Any]]:
        """A consistent read-only snapshot across several statements."""
        with self._pool.connection() as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    def _lock(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"lakesync:{self._schema}",))

    def _last(self, conn: psycopg.Connection[Any]) -> int:
        row = conn.execute(
            "SELECT greatest((SELECT coalesce(max(ingest), 0) FROM log),"
            " (SELECT value FROM counters WHERE name = 'stamp'))"
        ).fetchone()
        assert row is not None
        return int(row[0])

    def _stamp(self, conn: psycopg.Connection[Any]) -> int:
        self._lock(conn)
        stamp = next_ingest(self.clock, self._last(conn))
        conn.execute("UPDATE counters SET value = %s WHERE name = 'stamp'", (stamp,))
        return stamp

    # -- push -----------------------------------------------------------------------------------
    def append(self, gateway_id: str, deltas: Sequence[RowDelta]) -> AppendResult:
        """See :meth:`HotLog.append`."""
        gw = gateway_id
        with self._pool.connection() as conn, conn.transaction():
            ids = [d.delta_id for d in deltas]
            known = {
                r[0]
                for r in conn.execute(
                    "SELECT delta_id FROM log WHERE gw = %s AND delta_id = ANY(%s)", (gw, ids)
                )
            }
            new = fresh_deltas(deltas, known)
            if not new:
                return AppendResult([], len(deltas), self._last(conn))
            self._lock(conn)
            # Re-check under the lock: a concurrent process may have stored some meanwhile.
            known = {
                r[0]
                for r in conn.execute(
                    "SELECT delta_id FROM log WHERE gw = %s AND delta_id = ANY(%s)",
                    (gw, [d.delta_id for d in new]),
                )
            }
            new = fresh_deltas(new, known)
            last = self._last(conn)
            if not new:
                return AppendResult([], len(deltas), last)
            first = next_ingest(self.clock, last)
            entries = [LogEntry(first + i, gw, d) for i, d in enumerate(new)]
            bodies = [encode_delta(e.delta) for e in entries]
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO log (ingest, gw, delta_id, tbl, row_id, body)"
                    " VALUES (%s, %s, %s, %s, %s, %s)",
                    [
                        (e.ingest_hlc, gw, e.delta.delta_id, e.delta.table, e.delta.row_id, b)
                        for e, b in zip(entries, bodies, strict=True)
                    ],
                )
            conn.execute(
                "UPDATE counters SET value = value + %s WHERE name = 'bytes'",
                (sum(map(len, bodies)),),
            )
            keys = touched_keys(new)
            states = {k: r.state for k, r in _rows(conn, gw, keys).items()}
            before = copy_states(states, keys)
            merge_into(states, new)
            last_ingest = {(e.delta.table, e.delta.row_id): e.ingest_hlc for e in entries}
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO row_state (gw, tbl, row_id, state, last_ingest)"
                    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (gw, tbl, row_id)"
                    " DO UPDATE SET state = excluded.state, last_ingest = excluded.last_ingest",
                    [
                        (gw, t, r, encode_state(states[(t, r)]), last_ingest[(t, r)])
                        for t, r in keys
                    ],
                )
            notice = {
                "schema": self._schema,
                "gw": gw,
                "after": first - 1,
                "upto": entries[-1].ingest_hlc,
                "origin": self.origin,
            }
            conn.execute("SELECT pg_notify(%s, %s)", (_CHANNEL, json.dumps(notice)))
            rows = {k: RowRecord(states[k], last_ingest[k]) for k in keys}
            return AppendResult(entries, len(deltas), entries[-1].ingest_hlc, rows, before)

    # -- pull -----------------------------------------------------------------------------------
    def read_page(self, gateway_id: str, after: int, limit: int, with_rows: bool) -> Page:
        """See :meth:`HotLog.read_page`."""
        with self._read() as conn:
            raw = conn.execute(
                "SELECT ingest, body FROM log WHERE gw = %s AND ingest > %s"
                " ORDER BY ingest LIMIT %s",
                (gateway_id, after, limit + 1),
            ).fetchall()
            has_more = len(raw) > limit
            entries = [LogEntry(int(i), gateway_id, decode_delta(b)) for i, b in raw[:limit]]
            rows = (
                _rows(conn, gateway_id, touched_keys([e.delta for e in entries]))
                if with_rows
                else {}
            )
            head = _head(conn)
            return Page(entries, rows, head, has_more)

    def read_range(self, gateway_id: str, after: int, upto: int) -> Page:
        """See :meth:`HotLog.read_range`."""
        with self._read() as conn:
            raw = conn.execute(
                "SELECT ingest, body FROM log WHERE gw = %s AND ingest > %s AND ingest <= %s"
                " ORDER BY ingest",
                (gateway_id, after, upto),
            ).fetchall()
            entries = [LogEntry(int(i), gateway_id, decode_delta(b)) for i, b in raw]
            rows = _rows(conn, gateway_id, touched_keys([e.delta for e in entries]))
            head = _head(conn)
            return Page(entries, rows, head, False)

    def read_all_rows(self, gateway_id: str) -> Page:
        """See :meth:`HotLog.read_all_rows`."""
        with self._read() as conn:
            cur = conn.execute(
                "SELECT tbl, row_id, state, last_ingest FROM row_state WHERE gw = %s"
                " ORDER BY tbl, row_id",
                (gateway_id,),
            )
            rows = {(t, r): RowRecord(decode_state(s), int(li)) for t, r, s, li in cur}
            head = _head(conn)
            return Page([], rows, head, False)

    def read_rows(self, gateway_id: str, keys: Sequence[RowKey]) -> dict[RowKey, RowRecord]:
        """See :meth:`HotLog.read_rows`."""
        with self._pool.connection() as conn:
            return _rows(conn, gateway_id, keys)

    def row_history(
        self, gateway_id: str, keys: Sequence[RowKey], since: int, upto: int, max_deltas: int
    ) -> dict[RowKey, tuple[RowState, list[RowDelta]]]:
        """See :meth:`HotLog.row_history`."""
        out: dict[RowKey, tuple[RowState, list[RowDelta]]] = {}
        with self._read() as conn:
            for t, r in keys:
                raw = conn.execute(
                    "SELECT ingest, body FROM log WHERE gw = %s AND tbl = %s AND row_id = %s"
                    " AND ingest <= %s ORDER BY ingest LIMIT %s",
                    (gateway_id, t, r, upto, max_deltas + 1),
                ).fetchall()
                if len(raw) <= max_deltas:
                    out[(t, r)] = history_of([(int(i), decode_delta(b)) for i, b in raw], since)
        return out

    def head(self) -> int:
        """See :meth:`HotLog.head`."""
        with self._pool.connection() as conn:
            return _head(conn)

    # -- flusher --------------------------------------------------------------------------------
    def read_log(self, after: int, limit: int) -> list[tuple[int, str, RowDelta]]:
        """See :meth:`HotLog.read_log`."""
        with self._pool.connection() as conn:
            cur = conn.execute(
                "SELECT ingest, gw, body FROM log WHERE ingest > %s ORDER BY ingest LIMIT %s",
                (after, limit),
            )
            return [(int(i), g, decode_delta(b)) for i, g, b in cur]

    def mark_flushed(self, position: int) -> None:
        """See :meth:`HotLog.mark_flushed`."""
        with self._pool.connection() as conn, conn.transaction():
            row = conn.execute(
                "SELECT value FROM counters WHERE name = 'flushed' FOR UPDATE"
            ).fetchone()
            assert row is not None
            old = int(row[0])
            if position <= old:
                return
            size = conn.execute(
                "SELECT coalesce(sum(length(body)), 0) FROM log WHERE ingest > %s AND ingest <= %s",
                (old, position),
            ).fetchone()
            assert size is not None
            conn.execute("UPDATE counters SET value = %s WHERE name = 'flushed'", (position,))
            conn.execute(
                "UPDATE counters SET value = value + %s WHERE name = 'flushed_bytes'",
                (int(size[0]),),
            )

    def flushed_position(self) -> int:
        """See :meth:`HotLog.flushed_position`."""
        with self._pool.connection() as conn:
            return _counter(conn, "flushed")

    def unflushed_bytes(self) -> int:
        """See :meth:`HotLog.unflushed_bytes`."""
        with self._pool.connection() as conn:
            return _counter(conn, "bytes") - _counter(conn, "flushed_bytes")

    # -- documents ------------------------------------------------------------------------------
    def get_rules(self, gateway_id: str) -> RulesRecord:
        """See :meth:`HotLog.get_rules`."""
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT rules, stamp FROM gateway_rules WHERE gw = %s", (gateway_id,)
            ).fetchone()
        return RulesRecord(None, 0) if row is None else RulesRecord(decode_rules(row[0]), row[1])

    def set_rules(self, gateway_id: str, rules: SyncRules | None) -> RulesRecord:
        """See :meth:`HotLog.set_rules`."""
        body = encode_rules(rules)
        with self._pool.connection() as conn, conn.transaction():
            self._lock(conn)
            row = conn.execute(
                "SELECT rules, stamp FROM gateway_rules WHERE gw = %s", (gateway_id,)
            ).fetchone()
            if row is not None and (None if row[0] is None else bytes(row[0])) == body:
                return RulesRecord(rules, int(row[1]))
            if row is None and body is None:
                return RulesRecord(None, 0)
            stamp = self._stamp(conn)
            conn.execute(
                "INSERT INTO gateway_rules (gw, rules, stamp) VALUES (%s, %s, %s)"
                " ON CONFLICT (gw) DO UPDATE SET rules = excluded.rules, stamp = excluded.stamp",
                (gateway_id, body, stamp),
            )
            return RulesRecord(rules, stamp)

    def put_doc(self, gateway_id: str, kind: str, name: str, body: dict[str, Any]) -> None:
        """See :meth:`HotLog.put_doc`."""
        with self._pool.connection() as conn:
            conn.execute(
                "INSERT INTO gateway_docs (gw, kind, name, body) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (gw, kind, name) DO UPDATE SET body = excluded.body",
                (gateway_id, kind, name, msgspec.json.encode(body)),
            )

    def list_docs(self, gateway_id: str, kind: str) -> dict[str, dict[str, Any]]:
        """See :meth:`HotLog.list_docs`."""
        with self._pool.connection() as conn:
            cur = conn.execute(
                "SELECT name, body FROM gateway_docs WHERE gw = %s AND kind = %s ORDER BY name",
                (gateway_id, kind),
            )
            return {n: msgspec.json.decode(bytes(b)) for n, b in cur}

    def docs_of_kind(self, kind: str) -> list[tuple[str, str, dict[str, Any]]]:
        """See :meth:`HotLog.docs_of_kind`."""
        with self._pool.connection() as conn:
            cur = conn.execute(
                "SELECT gw, name, body FROM gateway_docs WHERE kind = %s ORDER BY gw, name",
                (kind,),
            )
            return [(g, n, msgspec.json.decode(bytes(b))) for g, n, b in cur]

    def delete_doc(self, gateway_id: str, kind: str, name: str) -> bool:
        """See :meth:`HotLog.delete_doc`."""
        with self._pool.connection() as conn:
            cur = conn.execute(
                "DELETE FROM gateway_docs WHERE gw = %s AND kind = %s AND name = %s",
                (gateway_id, kind, name),
            )
            return cur.rowcount > 0

    def view_stamp(self, gateway_id: str, client_id: str, claims_hash: str) -> int:
        """See :meth:`HotLog.view_stamp`."""
        query = "SELECT claims_hash, stamp FROM client_views WHERE gw = %s AND client_id = %s"
        with self._pool.connection() as conn:
            row = conn.execute(query, (gateway_id, client_id)).fetchone()
            if row is not None and row[0] == claims_hash:
                return int(row[1])
            with conn.transaction():
                self._lock(conn)
                row = conn.execute(query, (gateway_id, client_id)).fetchone()
                if row is not None and row[0] == claims_hash:
                    return int(row[1])
                stamp = 0 if row is None else self._stamp(conn)
                conn.execute(
                    "INSERT INTO client_views (gw, client_id, claims_hash, stamp)"
                    " VALUES (%s, %s, %s, %s) ON CONFLICT (gw, client_id) DO UPDATE"
                    " SET claims_hash = excluded.claims_hash, stamp = excluded.stamp",
                    (gateway_id, client_id, claims_hash, stamp),
                )
                return stamp

    # -- lifecycle ------------------------------------------------------------------------------
    def ping(self) -> None:
        """See :meth:`HotLog.ping`."""
        with self._pool.connection(timeout=2) as conn:
            conn.execute("SELECT 1")

    def listen(self, callback: Callable[[LogNotice], None]) -> None:
        """Deliver other processes' append notices to ``callback`` from a background thread."""

        def run() -> None:
            while not self._stop.is_set():
                try:
                    with psycopg.connect(self._dsn, autocommit=True) as conn:
                        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(_CHANNEL)))
                        while not self._stop.is_set():
                            for n in conn.notifies(timeout=0.5):
                                notice = json.loads(n.payload)
                                if (
                                    notice["schema"] == self._schema
                                    and notice["origin"] != self.origin
                                ):
                                    callback(
                                        LogNotice(
                                            notice["gw"],
                                            int(notice["after"]),
                                            int(notice["upto"]),
                                            notice["origin"],
                                        )
                                    )
                except psycopg.OperationalError:
                    self._stop.wait(1.0)  # the server went away; reconnect shortly

        thread = threading.Thread(target=run, name="hotlog-listen", daemon=True)
        thread.start()
        self._listeners.append(thread)

    def close(self) -> None:
        """See :meth:`HotLog.close`."""
        self._stop.set()
        for t in self._listeners:
            t.join(timeout=5)
        self._pool.close()


def _rows(
    conn: psycopg.Connection[Any], gw: str, keys: Sequence[RowKey]
) -> dict[RowKey, RowRecord]:
    if not keys:
        return {}
    cur = conn.execute(
        "SELECT tbl, row_id, state, last_ingest FROM row_state"
        " WHERE gw = %s AND (tbl, row_id) IN (SELECT * FROM unnest(%s::text[], %s::text[]))",
        (gw, [k[0] for k in keys], [k[1] for k in keys]),
    )
    return {(t, r): RowRecord(decode_state(bytes(s)), int(li)) for t, r, s, li in cur}


def _head(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT coalesce(max(ingest), 0) FROM log").fetchone()
    assert row is not None
    return int(row[0])


def _counter(conn: psycopg.Connection[Any], name: str) -> int:
    row = conn.execute("SELECT value FROM counters WHERE name = %s", (name,)).fetchone()
    assert row is not None
    return int(row[0])
