"""Checkpoints and hot-log trimming on SQL (the ports
:class:`~lakesync.hotlog.ports.CheckpointSink`, :class:`~lakesync.hotlog.ports.CheckpointServing`
and the trimming of :class:`~lakesync.hotlog.ports.LogMaintenance`): chunks staged one short write
each, published generations, and a trim that keeps what the trimmed entries still tell views."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lakesync.delta import RowDelta
from lakesync.hotlog._sql.core import C, SqlCore
from lakesync.hotlog.base import CheckpointInfo, RowKey, decode_delta, encode_state
from lakesync.merge import RowState, join_delta

__all__ = ["SqlCheckpointStore"]

UPSERT_TRIMMED = (
    "INSERT INTO trimmed_rows (gw, tbl, row_id, state) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (gw, tbl, row_id) DO UPDATE SET state = excluded.state"
)
INSERT_TRIMMED_WRITER = (
    "INSERT INTO trimmed_writers (gw, client_id, tbl, row_id) VALUES (?, ?, ?, ?)"
    " ON CONFLICT DO NOTHING"
)


class SqlCheckpointStore(SqlCore[C]):
    """Checkpoints, their chunks and the trimming they allow over the shared SQL tables."""

    def stage_checkpoint_chunk(self, gateway_id: str, upto: int, seq: int, body: bytes) -> None:
        """See :meth:`HotLog.stage_checkpoint_chunk`."""
        self._write(
            lambda conn: self._execute(
                conn,
                "INSERT INTO checkpoint_chunks (gw, upto, seq, body) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (gw, upto, seq) DO UPDATE SET body = excluded.body",
                (gateway_id, upto, seq, body),
            )
        )

    def publish_checkpoint(self, gateway_id: str, upto: int, chunks: int, rows: int) -> bool:
        """See :meth:`HotLog.publish_checkpoint`."""

        def op(conn: C) -> bool:
            self._lock(conn)
            old = self._checkpoint(conn, gateway_id, self._for_update)
            if old is not None and upto <= old.position:
                if upto not in (old.position, old.previous):
                    self._execute(
                        conn,
                        "DELETE FROM checkpoint_chunks WHERE gw = ? AND upto = ?",
                        (gateway_id, upto),
                    )
                return False
            self._execute(
                conn,
                "INSERT INTO checkpoints (gw, upto, chunks, row_count, previous, trimmed)"
                " VALUES (?, ?, ?, ?, ?, 0) ON CONFLICT (gw) DO UPDATE SET upto = excluded.upto,"
                " chunks = excluded.chunks, row_count = excluded.row_count,"
                " previous = excluded.previous",
                (gateway_id, upto, chunks, rows, None if old is None else old.position),
            )
            # The previous generation stays for the streams still reading it.
            keep = upto if old is None else old.position
            self._execute(
                conn,
                "DELETE FROM checkpoint_chunks WHERE gw = ? AND upto <> ? AND upto <> ?",
                (gateway_id, upto, keep),
            )
            return True

        return self._write(op)

    def _checkpoint(self, conn: C, gw: str, suffix: str = "") -> CheckpointInfo | None:
        raw = self._fetch(
            conn,
            "SELECT upto, chunks, row_count, trimmed, previous FROM checkpoints WHERE gw = ?"
            + suffix,
            (gw,),
        )
        if not raw:
            return None
        upto, chunks, rows, trimmed, previous = raw[0]
        before = None if previous is None else int(previous)
        return CheckpointInfo(int(upto), int(chunks), int(rows), int(trimmed), before)

    def checkpoint(self, gateway_id: str) -> CheckpointInfo | None:
        """See :meth:`HotLog.checkpoint`."""
        with self._connection() as conn:
            return self._checkpoint(conn, gateway_id)

    def checkpoint_chunk(self, gateway_id: str, upto: int, seq: int) -> bytes | None:
        """See :meth:`HotLog.checkpoint_chunk`."""
        with self._connection() as conn:
            raw = self._fetch(
                conn,
                "SELECT body FROM checkpoint_chunks WHERE gw = ? AND upto = ? AND seq = ?",
                (gateway_id, upto, seq),
                # A chunk is about 256 KiB: as text, PostgreSQL sends twice that in hex.
                binary=True,
            )
        return bytes(raw[0][0]) if raw else None

    def trim_log(self, gateway_id: str, upto: int, limit: int = 10_000) -> int:
        """See :meth:`HotLog.trim_log`."""

        def op(conn: C) -> int:
            self._lock(conn)
            cp = self._checkpoint(conn, gateway_id, self._for_update)
            if cp is None:
                return 0
            bound = min(upto, cp.position, self._counter(conn, "flushed"))
            # Ingest stamps are unique: these are exactly the entries up to the bound below.
            raw = self._fetch(
                conn,
                "SELECT ingest, body FROM log WHERE gw = ? AND ingest <= ? ORDER BY ingest"
                " LIMIT ?",
                (gateway_id, bound, limit),
            )
            if not raw:
                return 0  # nothing to delete: the horizon stays, so no cursor expires
            # The horizon is the last entry deleted, not the bound asked for: a cursor at or
            # after it misses nothing, and a first pull (cursor 0) stays valid until an entry
            # really went.
            bound = int(raw[-1][0])
            if bound <= cp.trimmed:
                return 0
            self._keep_trimmed(conn, gateway_id, [body for _, body in raw])
            # The horizon moves in the same transaction as the deletion: a pull that read before
            # it and checks the horizon after its read never misses what was deleted.
            self._execute(
                conn, "UPDATE checkpoints SET trimmed = ? WHERE gw = ?", (bound, gateway_id)
            )
            # The log's head may go with them: the stamp counter keeps it, so no later stamp
            # (of a process whose clock is behind) falls at or below an entry already served.
            self._execute(
                conn,
                "UPDATE counters SET value = ? WHERE name = 'stamp' AND value < ?",
                (bound, bound),
            )
            return self._execute(
                conn, "DELETE FROM log WHERE gw = ? AND ingest <= ?", (gateway_id, bound)
            )

        return self._write(op)

    def trimmed_through(self, gateway_id: str) -> int:
        """See :meth:`HotLog.trimmed_through`."""
        cp = self.checkpoint(gateway_id)
        return 0 if cp is None else cp.trimmed

    def _keep_trimmed(self, conn: C, gw: str, bodies: Sequence[Any]) -> None:
        """Keep what the log entries of ``gw`` about to be trimmed (their ``bodies``, in ingest
        order) still tell: each row's state merged from them (where :meth:`row_history` starts)
        and which clients wrote which rows (a checkpoint evicts those,
        :meth:`rows_written_among`)."""
        deltas: dict[RowKey, list[RowDelta]] = {}
        for body in bodies:
            d = decode_delta(body)
            deltas.setdefault((d.table, d.row_id), []).append(d)
        if not deltas:
            return
        states = self._trimmed_states(conn, gw, list(deltas))
        writers: set[tuple[str, str, str, str]] = set()
        for key, row in deltas.items():
            state = states.setdefault(key, RowState())
            for d in row:
                join_delta(state, d)
                writers.add((gw, d.client_id, d.table, d.row_id))
        self._execute_many(
            conn, UPSERT_TRIMMED, [(gw, t, r, encode_state(st)) for (t, r), st in states.items()]
        )
        self._execute_many(conn, INSERT_TRIMMED_WRITER, sorted(writers))
