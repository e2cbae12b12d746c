"""The log of accepted deltas on SQL (:class:`~lakesync.hotlog.ports.PushLog`,
:class:`~lakesync.hotlog.ports.HotLogSource` and parts of the other ports): appends with their
deduplication, merge and index upkeep, pages by ingest HLC and the flusher's marks."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from lakesync.delta import RowDelta
from lakesync.hotlog._batch import (
    copy_states,
    fresh_deltas,
    merge_into,
    next_ingest,
    touched_keys,
)
from lakesync.hotlog._sql.core import LOG_COLUMNS, C, hlc_column
from lakesync.hotlog._sql.index import SqlRulesIndex
from lakesync.hotlog.base import (
    AppendResult,
    LogEntry,
    Page,
    RowRecord,
    WriteCheck,
    decode_delta,
    encode_delta,
    encode_state,
)

__all__ = ["SqlDeltaLog", "hlc_ranges"]

INSERT_LOG = f"INSERT INTO log ({LOG_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
UPSERT_STATE = (
    "INSERT INTO row_state (gw, tbl, row_id, state, last_ingest) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (gw, tbl, row_id)"
    " DO UPDATE SET state = excluded.state, last_ingest = excluded.last_ingest"
)

_RANGE_GAP = 10_000 << 16
"""HLCs further apart than this (10 s of wall clock) are looked up as separate ranges."""


def hlc_ranges(hlcs: Collection[int]) -> list[tuple[int, int]]:
    """``(low, high)`` ranges covering ``hlcs``, split where two neighbours are more than
    :data:`_RANGE_GAP` apart, so a range spans little besides the HLCs asked for."""
    ranges: list[tuple[int, int]] = []
    for h in sorted(hlcs):
        if ranges and h - ranges[-1][1] <= _RANGE_GAP:
            ranges[-1] = (ranges[-1][0], h)
        else:
            ranges.append((h, h))
    return ranges



class SqlDeltaLog(SqlRulesIndex[C]):
    """The log over the shared SQL tables (an append indexes under the rules)."""

    def _known_ids(self, conn: C, gw: str, deltas: Sequence[RowDelta]) -> set[str]:
        """The deltaIds of ``deltas`` that the log of ``gw`` holds. A stored delta with the same
        deltaId has the same client id and HLC, which :data:`AFTER_COLUMNS_DDL` indexes; each
        client's HLCs are looked up as ranges (:func:`hlc_ranges`), which every planner turns
        into one bounded index scan (PostgreSQL may scan a client's whole history for an IN
        list it misjudges)."""
        wanted = {d.delta_id for d in deltas}
        by_client: dict[str, set[int]] = {}
        for d in deltas:
            by_client.setdefault(d.client_id, set()).add(hlc_column(d.hlc))
        known: set[str] = set()
        for client_id, hlcs in by_client.items():
            for low, high in hlc_ranges(hlcs):
                for (did,) in self._fetch(
                    conn,
                    "SELECT delta_id FROM log WHERE gw = ? AND client_id = ?"
                    " AND hlc >= ? AND hlc <= ?",
                    (gw, client_id, low, high),
                ):
                    if did in wanted:
                        known.add(str(did))
        return known

    def _insert_log(self, conn: C, rows: Sequence[tuple[Any, ...]]) -> None:
        """Insert log rows ``(ingest, gw, delta_id, tbl, row_id, body, batch_end, client_id,
        hlc)``; a driver may send them in bulk."""
        self._execute_many(conn, INSERT_LOG, rows)

    def _save_states(self, conn: C, gw: str, rows: Sequence[tuple[str, str, bytes, int]]) -> None:
        """Upsert the row states ``(tbl, row_id, state, last_ingest)`` of ``gw`` (distinct rows);
        a driver may send them in bulk."""
        self._execute_many(conn, UPSERT_STATE, [(gw, *row) for row in rows])

    def _appended(self, conn: C, gw: str, after: int, upto: int) -> None:
        """Called inside an append's transaction once entries ``(after, upto]`` are stored."""

    # -- push -----------------------------------------------------------------------------------
    def append(
        self, gateway_id: str, deltas: Sequence[RowDelta], check: WriteCheck | None = None
    ) -> AppendResult:
        """See :meth:`HotLog.append`."""
        batch = list(deltas)
        return self._write(lambda conn: self._append(conn, gateway_id, batch, check))

    def _append(
        self, conn: C, gw: str, deltas: list[RowDelta], check: WriteCheck | None
    ) -> AppendResult:
        # Every write transaction holds the writers' lock from its start (GroupCommit's begin),
        # so what the log holds now is what this append must skip, and the rules and row
        # states read here are the ones the append merges into.
        new = fresh_deltas(deltas, self._known_ids(conn, gw, deltas))
        last = self._last(conn)
        if not new:
            return AppendResult([], len(deltas), last)
        keys = touched_keys(new)
        states = {k: r.state for k, r in self._rows(conn, gw, keys).items()}
        record = self._rules_record(conn, gw)
        rules = record.rules
        if check is not None:
            check(rules, new, states, lambda t, plan: self._relation(conn, gw, t, plan))
        first = next_ingest(self.clock, last)
        entries = [LogEntry(first + i, gw, d) for i, d in enumerate(new)]
        bodies = [encode_delta(e.delta) for e in entries]
        end = entries[-1].ingest_hlc
        self._insert_log(
            conn,
            [
                (
                    e.ingest_hlc,
                    gw,
                    e.delta.delta_id,
                    e.delta.table,
                    e.delta.row_id,
                    b,
                    end,
                    e.delta.client_id,
                    hlc_column(e.delta.hlc),
                )
                for e, b in zip(entries, bodies, strict=True)
            ],
        )
        self._execute(
            conn,
            "UPDATE counters SET value = value + ? WHERE name = 'bytes'",
            (sum(map(len, bodies)),),
        )
        before = copy_states(states, keys)
        merge_into(states, new)
        last_ingest = {(e.delta.table, e.delta.row_id): e.ingest_hlc for e in entries}
        self._save_states(
            conn,
            gw,
            [(t, r, encode_state(states[(t, r)]), last_ingest[(t, r)]) for t, r in keys],
        )
        self._reindex(conn, gw, rules, {k: states[k] for k in keys})
        head = entries[-1].ingest_hlc
        self._appended(conn, gw, first - 1, head)
        rows = {k: RowRecord(states[k], last_ingest[k]) for k in keys}
        return AppendResult(entries, len(deltas), head, rows, before, record)

    def committed_head(self) -> int:
        """See :meth:`HotLog.committed_head`: writers are serialised, so whatever one read sees
        committed, every stamp below it was committed before."""
        with self._connection() as conn:
            return self._last(conn)

    def raise_floor(self, stamp: int) -> int:
        """See :meth:`HotLog.raise_floor`: the floor is the stamp counter that rules and view
        stamps keep (:meth:`_last` reads it), so an append's next ingest exceeds it."""

        def op(conn: C) -> int:
            self._lock(conn)
            self._execute(
                conn,
                "UPDATE counters SET value = ? WHERE name = 'stamp' AND value < ?",
                (stamp, stamp),
            )
            return self._last(conn)

        return self._write(op)

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

    def head(self) -> int:
        """See :meth:`HotLog.head`."""
        with self._connection() as conn:
            return self._head(conn)

    # -- flusher --------------------------------------------------------------------------------
    def read_log(
        self, after: int, limit: int, gateway_id: str | None = None
    ) -> list[LogEntry]:
        """See :meth:`HotLog.read_log`."""
        with self._connection() as conn:
            if gateway_id is None:
                query = "SELECT ingest, gw, body FROM log WHERE ingest > ? ORDER BY ingest LIMIT ?"
                params: tuple[Any, ...] = (after, limit)
            else:
                query = (
                    "SELECT ingest, gw, body FROM log WHERE gw = ? AND ingest > ?"
                    " ORDER BY ingest LIMIT ?"
                )
                params = (gateway_id, after, limit)
            raw = self._fetch(conn, query, params)
            return [LogEntry(int(i), g, decode_delta(b)) for i, g, b in raw]

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
