"""The shared hot log on PostgreSQL (psycopg 3 + pool), for several gateway processes.

Appends are serialised per store with a transaction-scoped advisory lock; the ingest HLCs are
assigned inside the lock from ``max(HLC.now(), last stored + 1)``, and the lock is released only
after the commit is visible, so ingest order equals commit order and readers never see a gap.
Within a process the writes go through one writer thread that commits whatever is queued in one
transaction (group commit, :mod:`lakesync.hotlog._group`): one lock and one commit for many
pushes. Each append sends a ``NOTIFY`` (delivered on commit) that the other processes turn into
WebSocket broadcasts.

Every session carries the limits of :class:`~lakesync.config.StoreConfig`: a process that stops
answering while it holds the write lock (frozen, cut off) is ended by the server once it has been
idle in its transaction for ``pg_idle_in_transaction_timeout``, which releases the lock; its
transaction fails, so none of its pushes is acknowledged. Lock waits and statements are bounded,
and TCP keepalives on both ends notice a peer that went away. Pooled connections are checked
before each use, so connections a server restart broke are replaced without failing a request.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool, PoolClosed

from lakesync.config import StoreConfig
from lakesync.hlc import HLC
from lakesync.hotlog._group import GroupCommit
from lakesync.hotlog._sql import (
    ADDED_COLUMNS,
    AFTER_COLUMNS_DDL,
    LOG_COLUMNS,
    SqlHotLog,
    add_column,
    schema_ddl,
)
from lakesync.hotlog.base import LogNotice, RowKey, RowRecord, decode_state

__all__ = ["PostgresHotLog", "connection_params", "session_settings"]

_CHANNEL = "lakesync_hotlog"

T = TypeVar("T")

_COPY_LOG = f"COPY log ({LOG_COLUMNS}) FROM STDIN"
_UPSERT_STATES = (
    "INSERT INTO row_state (gw, tbl, row_id, state, last_ingest)"
    " SELECT %s, t, r, s, i FROM unnest(%s::text[], %s::text[], %s::bytea[], %s::bigint[])"
    " AS u(t, r, s, i) ON CONFLICT (gw, tbl, row_id)"
    " DO UPDATE SET state = excluded.state, last_ingest = excluded.last_ingest"
)

_WRITTEN_AMONG = (
    "SELECT k.t, k.r FROM unnest(%s::text[], %s::text[]) AS k(t, r) WHERE %s = ANY"
    " (ARRAY(SELECT client_id FROM log WHERE gw = %s AND tbl = k.t AND row_id = k.r))"
)
"""Those of the keys a client has a log entry of. The sub-select runs once per key and names no
client, so it probes the row index (log_row) for the key's entries: written as an IN list, a
join or an EXISTS with the client in it, the planner may scan every entry of the client
(log_client_hlc) instead, per checkpoint chunk, as it does on a log it has no statistics of
yet (after a load, before autovacuum analyses it)."""

_TRIMMED_WRITTEN_AMONG = (
    "SELECT k.t, k.r FROM unnest(%s::text[], %s::text[]) AS k(t, r) WHERE coalesce((SELECT true"
    " FROM trimmed_writers WHERE gw = %s AND client_id = %s AND tbl = k.t AND row_id = k.r),"
    " false)"
)
"""Those of the keys among the rows a client wrote whose entries were trimmed: one statement
for the chunk, not an IN list per 500 ids; the scalar sub-select (never turned into a join)
probes the primary key once per key, however many rows the client wrote."""

_DDL = schema_ddl(integer="BIGINT", blob="BYTEA")


class _QuietReconnects(logging.Filter):
    """Drop the pool's line per failed connection attempt (several a second while the server is
    down, each with libpq's multi-line text): a request that finds the store down logs one
    line naming it (:mod:`lakesync.api.errors`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(
            ("error connecting in", "reconnection attempt in pool", "discarding closed")
        )


logging.getLogger("psycopg.pool").addFilter(_QuietReconnects())


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def connection_params(limits: StoreConfig) -> dict[str, Any]:
    """libpq's connection parameters for ``limits``' client side: TCP keepalives and
    ``tcp_user_timeout`` (a limit of 0 is left to the operating system)."""
    params: dict[str, Any] = {"keepalives": 1}
    for key, value in (
        ("keepalives_idle", round(limits.pg_keepalives_idle)),
        ("keepalives_interval", round(limits.pg_keepalives_interval)),
        ("keepalives_count", limits.pg_keepalives_count),
        ("tcp_user_timeout", _ms(limits.pg_tcp_user_timeout)),
    ):
        if value > 0:
            params[key] = value
    return params


def session_settings(limits: StoreConfig) -> dict[str, str]:
    """The server settings of a store session under ``limits`` (0 turns a limit off): its
    timeouts and the server side's TCP keepalives."""
    return {
        "idle_in_transaction_session_timeout": f"{_ms(limits.pg_idle_in_transaction_timeout)}ms",
        "lock_timeout": f"{_ms(limits.pg_lock_timeout)}ms",
        "statement_timeout": f"{_ms(limits.pg_statement_timeout)}ms",
        "tcp_keepalives_idle": str(round(limits.pg_keepalives_idle)),
        "tcp_keepalives_interval": str(round(limits.pg_keepalives_interval)),
        "tcp_keepalives_count": str(limits.pg_keepalives_count),
        "tcp_user_timeout": str(_ms(limits.pg_tcp_user_timeout)),
    }


class PostgresHotLog(SqlHotLog[psycopg.Connection[Any]]):
    """The PostgreSQL implementation of :class:`HotLog` (see module docstring)."""

    _for_update = " FOR UPDATE"

    def __init__(
        self,
        dsn: str,
        clock: HLC,
        schema: str = "lakesync",
        pool_size: int = 8,
        limits: StoreConfig = StoreConfig(),  # noqa: B008 (frozen: one shared default is safe)
    ) -> None:
        super().__init__(clock)
        self._dsn = dsn
        self._schema = schema
        self._params = connection_params(limits)
        self._settings = session_settings(limits)
        self.origin = uuid.uuid4().hex
        with psycopg.connect(dsn, autocommit=True, **self._params) as conn:
            if not _schema_is_current(conn, schema):
                _create_schema(conn, schema)
        self._pool = ConnectionPool(
            dsn,
            kwargs=self._params,
            min_size=1,
            max_size=pool_size,
            configure=self._configure,
            check=ConnectionPool.check_connection,
            timeout=limits.pg_pool_timeout,
            # Give a failed reconnection up after a second, not after the pool's backoff has
            # grown through an outage: the next request then connects at once, so the first
            # requests after a restart do not wait out a backoff and fail.
            reconnect_timeout=1.0,
            open=True,
            name=f"hotlog-{schema}",
        )
        self._listeners: list[threading.Thread] = []
        self._stop = threading.Event()
        # role -> (the session holding the role's advisory lock or trying to, whether it holds it)
        self._leads: dict[str, tuple[psycopg.Connection[Any], bool]] = {}
        self._leads_lock = threading.Lock()
        # Group commit: the writes of this process share a transaction, its advisory lock and
        # its commit (appends are serialised by the lock anyway).
        self._writes: GroupCommit[psycopg.Connection[Any]] = GroupCommit(
            f"hotlog-writer-{schema}",
            self._pool.connection,
            self._begin,
            _rollback,
            closed=lambda: PoolClosed("the hot log is closed"),  # 503, as a pool closed is
        )
        self._write(self.fill_added_columns)

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        # Autocommit: every transaction below is explicit (_write() or _snapshot()).
        conn.autocommit = True
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self._schema)))
        self._limit(conn)

    def _limit(self, conn: psycopg.Connection[Any]) -> None:
        """Put the session under the store's limits (see module docstring)."""
        names, values = list(self._settings), list(self._settings.values())
        conn.execute(
            "SELECT set_config(n, v, false) FROM unnest(%s::text[], %s::text[]) AS s(n, v)",
            (names, values),
        )

    @contextmanager
    def _snapshot(self) -> Iterator[psycopg.Connection[Any]]:
        with self._pool.connection() as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    def _connection(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        # Autocommit: a single statement reads one snapshot without a BEGIN/COMMIT round trip.
        return self._pool.connection()

    def _write(self, op: Callable[[psycopg.Connection[Any]], T]) -> T:
        return self._writes.write(op)

    def _begin(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("BEGIN")
        self._lock(conn)

    def _lock(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"lakesync:{self._schema}",))

    # -- statements -----------------------------------------------------------------------------
    def _fetch(
        self,
        conn: psycopg.Connection[Any],
        query: str,
        params: Sequence[Any] = (),
        *,
        binary: bool = False,
    ) -> list[Any]:
        return conn.execute(_pg(query), params, binary=binary).fetchall()

    def _execute(
        self, conn: psycopg.Connection[Any], query: str, params: Sequence[Any] = ()
    ) -> int:
        return conn.execute(_pg(query), params).rowcount

    def _execute_many(
        self, conn: psycopg.Connection[Any], query: str, rows: Sequence[Sequence[Any]]
    ) -> None:
        with conn.cursor() as cur:
            cur.executemany(_pg(query), rows)

    def _insert_log(self, conn: psycopg.Connection[Any], rows: Sequence[tuple[Any, ...]]) -> None:
        # One COPY stream instead of a statement per delta.
        with conn.cursor() as cur, cur.copy(_COPY_LOG) as copy:
            for row in rows:
                copy.write_row(row)

    def _save_states(
        self, conn: psycopg.Connection[Any], gw: str, rows: Sequence[tuple[str, str, bytes, int]]
    ) -> None:
        # One statement over arrays instead of a statement per row.
        conn.execute(
            _UPSERT_STATES,
            (
                gw,
                [r[0] for r in rows],
                [r[1] for r in rows],
                [r[2] for r in rows],
                [r[3] for r in rows],
            ),
        )

    def _rows(
        self, conn: psycopg.Connection[Any], gw: str, keys: Sequence[RowKey]
    ) -> dict[RowKey, RowRecord]:
        # One statement, so it is consistent outside a snapshot too (see _connection).
        if not keys:
            return {}
        cur = conn.execute(
            "SELECT tbl, row_id, state, last_ingest FROM row_state"
            " WHERE gw = %s AND (tbl, row_id) IN (SELECT * FROM unnest(%s::text[], %s::text[]))",
            (gw, [k[0] for k in keys], [k[1] for k in keys]),
        )
        return {(t, r): RowRecord(decode_state(s), int(li)) for t, r, s, li in cur}

    def _written_among(
        self, conn: psycopg.Connection[Any], gw: str, client_id: str, keys: Sequence[RowKey]
    ) -> set[RowKey]:
        cur = conn.execute(
            _WRITTEN_AMONG, ([k[0] for k in keys], [k[1] for k in keys], client_id, gw)
        )
        return {(str(t), str(r)) for t, r in cur}

    def _trimmed_written_among(
        self, conn: psycopg.Connection[Any], gw: str, client_id: str, keys: Sequence[RowKey]
    ) -> set[RowKey]:
        cur = conn.execute(
            _TRIMMED_WRITTEN_AMONG, ([k[0] for k in keys], [k[1] for k in keys], gw, client_id)
        )
        return {(str(t), str(r)) for t, r in cur}

    def _appended(self, conn: psycopg.Connection[Any], gw: str, after: int, upto: int) -> None:
        notice = {
            "schema": self._schema,
            "gw": gw,
            "after": after,
            "upto": upto,
            "origin": self.origin,
        }
        # Delivered on commit, to every listening process (this one ignores its own origin).
        conn.execute("SELECT pg_notify(%s, %s)", (_CHANNEL, json.dumps(notice)))

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
                    with psycopg.connect(self._dsn, autocommit=True, **self._params) as conn:
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

    def lead(self, role: str) -> bool:
        """See :meth:`HotLog.lead`: a session-level advisory lock on a connection of its own, held
        until this store closes or that session dies (then another process takes the lead)."""
        key = f"lakesync-lead:{self._schema}:{role}"
        with self._leads_lock:
            conn, held = self._leads.get(role, (None, False))
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self._dsn, autocommit=True, **self._params)
                    self._limit(conn)
                    held = False
                    self._leads[role] = (conn, held)
                if held:
                    conn.execute("SELECT 1")  # the session lives, so it still holds the lock
                    return True
                row = conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,)).fetchone()
            except psycopg.Error:
                if conn is not None:
                    conn.close()
                self._leads.pop(role, None)
                return False
            held = bool(row and row[0])
            self._leads[role] = (conn, held)
            return held

    @contextmanager
    def exclusive(self, name: str) -> Iterator[None]:
        """See :meth:`HotLog.exclusive`: a transaction-level advisory lock, released when the
        block ends or its session dies. The block may run long with the transaction idle (a
        landing flush writes the lake meanwhile) and a waiter waits for it, so this transaction
        alone is under none of the store's timeouts."""
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(
                "SELECT set_config(n, '0', true) FROM unnest(%s::text[]) AS s(n)",
                (["idle_in_transaction_session_timeout", "lock_timeout", "statement_timeout"],),
            )
            key = f"lakesync-mutex:{self._schema}:{name}"
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (key,))
            yield

    def close(self) -> None:
        """See :meth:`HotLog.close`."""
        self._stop.set()
        for t in self._listeners:
            t.join(timeout=5)
        with self._leads_lock:
            for conn, _ in self._leads.values():
                conn.close()
            self._leads.clear()
        self._writes.close()
        self._pool.close()


_RELATIONS = frozenset(
    re.findall(r"CREATE (?:TABLE|INDEX) IF NOT EXISTS (\w+)", _DDL + ";".join(AFTER_COLUMNS_DDL))
)


def _schema_is_current(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Whether the schema has every table, index and added column already. Then opening the
    store runs no DDL: ``CREATE INDEX IF NOT EXISTS`` still locks its table and ``ALTER TABLE``
    locks it exclusively even when there is nothing to do, so a process (re)starting while the
    others write would queue behind their transactions, and they behind it (a deadlock)."""
    relations = {
        name for (name,) in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s", (schema,))
    }
    if not _RELATIONS.issubset(relations):
        return False
    columns = set(conn.execute(
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = %s", (schema,)).fetchall())
    return all((table, column) in columns for table, column, _ in ADDED_COLUMNS)


def _create_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    """Create the schema's missing tables, columns and indexes, one process at a time."""
    conn.execute("SELECT pg_advisory_lock(hashtext('lakesync-ddl'))")
    try:
        ident = sql.Identifier(schema)
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        conn.execute(_DDL)
        for table, column, typ in ADDED_COLUMNS:
            conn.execute(add_column(table, column, typ, integer="BIGINT", dialect="postgres"))
        for statement in AFTER_COLUMNS_DDL:
            conn.execute(statement)
    finally:
        conn.execute("SELECT pg_advisory_unlock(hashtext('lakesync-ddl'))")


def _rollback(conn: psycopg.Connection[Any]) -> None:
    # A connection that broke is discarded by the pool; nothing to roll back on it.
    if not conn.broken and conn.info.transaction_status != TransactionStatus.IDLE:
        conn.execute("ROLLBACK")


def _pg(query: str) -> str:
    """A shared ``?``-style statement in psycopg's ``%s`` style (the statements hold no ``%``)."""
    return query.replace("?", "%s")
