"""The hot-log logic shared by the SQL stores: the statements, reads, appends and bookkeeping.

Both stores keep the same tables (:func:`schema_ddl`). A driver supplies only what differs: its
column types, how it gets a connection, runs a write transaction and serialises writers, its
parameter style (the statements here use ``?``), and the lookups its dialect writes differently.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Generic, TypeVar

import msgspec

from lakesync.api.store._batch import (
    copy_states,
    fresh_deltas,
    history_of,
    merge_into,
    next_ingest,
    touched_keys,
)
from lakesync.api.store.base import (
    AppendResult,
    CheckpointInfo,
    HotLog,
    LogEntry,
    Page,
    RowKey,
    RowRecord,
    RulesRecord,
    WriteCheck,
    decode_delta,
    decode_rules,
    decode_state,
    encode_delta,
    encode_rules,
    encode_state,
)
from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.merge import RowState, join_delta
from lakesync.rules import SyncRules, index_entries

__all__ = ["SqlHotLog", "schema_ddl"]

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
:meth:`SqlHotLog.fill_added_columns`."""

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
"""The columns of a log row as :meth:`SqlHotLog._insert_log` receives them."""

INSERT_LOG = f"INSERT INTO log ({LOG_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
UPSERT_STATE = (
    "INSERT INTO row_state (gw, tbl, row_id, state, last_ingest) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (gw, tbl, row_id)"
    " DO UPDATE SET state = excluded.state, last_ingest = excluded.last_ingest"
)

UPSERT_TRIMMED = (
    "INSERT INTO trimmed_rows (gw, tbl, row_id, state) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (gw, tbl, row_id) DO UPDATE SET state = excluded.state"
)
INSERT_TRIMMED_WRITER = (
    "INSERT INTO trimmed_writers (gw, client_id, tbl, row_id) VALUES (?, ?, ?, ?)"
    " ON CONFLICT DO NOTHING"
)

_MAX_HLC_COLUMN = 2**63 - 1

_IN_CHUNK = 500
"""Row ids per ``IN`` list of a look-up by key."""


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


def _hlc_column(hlc: int) -> int:
    """A client HLC as the log's signed 64-bit ``hlc`` column holds it. Only a key to look a
    deltaId up by, so the clamp of an HLC no gateway accepts (beyond 2^63) loses nothing."""
    return min(hlc, _MAX_HLC_COLUMN)


def schema_ddl(integer: str, blob: str, keyed: str = "") -> str:
    """The store's tables (idempotent DDL) in a dialect: its 64-bit integer and byte-string
    types, and ``keyed``, the options of tables looked up only by their primary key."""
    return _DDL.format(integer=integer, blob=blob, keyed=keyed)


class SqlHotLog(HotLog, Generic[C]):
    """:class:`HotLog` over the shared SQL tables; ``C`` is the driver's connection type."""

    _for_update = ""
    """Suffix of a SELECT whose value the transaction then changes (a row lock where needed)."""

    def __init__(self, clock: HLC) -> None:
        super().__init__(clock)
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
    def _fetch(self, conn: C, query: str, params: Sequence[Any] = ()) -> list[Any]:
        """The result rows of a ``?``-style query."""

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
    def _written_among(
        self, conn: C, gw: str, client_id: str, keys: Sequence[RowKey]
    ) -> set[RowKey]:
        """Those of ``keys`` (not empty) the client has a log entry of, each looked up through
        the log's row index: the work is bounded by the keys, however much the client wrote."""

    def _known_ids(self, conn: C, gw: str, deltas: Sequence[RowDelta]) -> set[str]:
        """The deltaIds of ``deltas`` that the log of ``gw`` holds. A stored delta with the same
        deltaId has the same client id and HLC, which :data:`AFTER_COLUMNS_DDL` indexes; each
        client's HLCs are looked up as ranges (:func:`hlc_ranges`), which every planner turns
        into one bounded index scan (PostgreSQL may scan a client's whole history for an IN
        list it misjudges)."""
        wanted = {d.delta_id for d in deltas}
        by_client: dict[str, set[int]] = {}
        for d in deltas:
            by_client.setdefault(d.client_id, set()).add(_hlc_column(d.hlc))
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
                    (d.client_id, _hlc_column(d.hlc), int(i))
                    for i, d in ((i, decode_delta(b)) for i, b in raw)
                ],
            )

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
            check(rules, new, states)
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
                    _hlc_column(e.delta.hlc),
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
        self, gateway_id: str, keys: Sequence[RowKey], since: int, upto: int
    ) -> dict[RowKey, tuple[RowState, list[tuple[int, RowDelta]]]]:
        """See :meth:`HotLog.row_history`. A row's history starts from the state of its trimmed
        deltas (a pull's cursor is never older than the horizon: they all precede it)."""
        out: dict[RowKey, tuple[RowState, list[tuple[int, RowDelta]]]] = {}
        with self._snapshot() as conn:
            trimmed = self._trimmed_states(conn, gateway_id, keys)
            for t, r in keys:
                raw = self._fetch(
                    conn,
                    "SELECT ingest, coalesce(batch_end, ingest), body FROM log"
                    " WHERE gw = ? AND tbl = ? AND row_id = ? AND ingest <= ? ORDER BY ingest",
                    (gateway_id, t, r, upto),
                )
                out[(t, r)] = history_of(
                    [(int(i), int(e), decode_delta(b)) for i, e, b in raw],
                    since,
                    trimmed.get((t, r)),
                )
        return out

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

    # -- the filter-column index ----------------------------------------------------------------
    def _rules_record(self, conn: C, gw: str) -> RulesRecord:
        """The current rules of ``gw`` (which its index follows; None: it has none, nothing is
        indexed) and their stamp."""
        raw = self._fetch(conn, "SELECT rules, stamp FROM gateway_rules WHERE gw = ?", (gw,))
        return RulesRecord(self._rules(raw[0][0]), int(raw[0][1])) if raw else RulesRecord(None, 0)

    def _rules(self, raw: bytes | str | memoryview | None) -> SyncRules | None:
        """A stored rules document, parsed once per distinct body (every push reads them)."""
        if raw is None:
            return None
        body = bytes(raw) if isinstance(raw, memoryview) else raw
        if body not in self._rules_memo:
            if len(self._rules_memo) > 256:
                self._rules_memo.clear()
            self._rules_memo[body] = decode_rules(body)
        return self._rules_memo[body]

    def _reindex(
        self, conn: C, gw: str, rules: SyncRules | None, states: dict[RowKey, RowState]
    ) -> None:
        """Bring the index entries of changed rows up to date for the current ``rules``."""
        if rules is None:
            return
        self._execute_many(
            conn,
            "DELETE FROM row_index WHERE gw = ? AND tbl = ? AND row_id = ?",
            [(gw, t, r) for t, r in states],
        )
        self._execute_many(
            conn,
            "INSERT INTO row_index (gw, col, val, tbl, row_id) VALUES (?, ?, ?, ?, ?)",
            [
                (gw, col, val, t, r)
                for (t, r), state in states.items()
                for col, val in index_entries(rules, state.visible())
            ],
        )

    def _rebuild_index(self, conn: C, gw: str, rules: SyncRules | None, stamp: int) -> None:
        """Index every row of ``gw`` for new rules (an admin operation: one pass over the rows)."""
        self._execute(conn, "DELETE FROM row_index WHERE gw = ?", (gw,))
        rows = self._fetch(conn, "SELECT tbl, row_id, state FROM row_state WHERE gw = ?", (gw,))
        self._execute_many(
            conn,
            "INSERT INTO row_index (gw, col, val, tbl, row_id) VALUES (?, ?, ?, ?, ?)",
            [
                (gw, col, val, t, r)
                for t, r, raw in rows
                for col, val in index_entries(rules, decode_state(raw).visible())
            ],
        )
        self._execute(
            conn,
            "INSERT INTO row_index_built (gw, stamp) VALUES (?, ?)"
            " ON CONFLICT (gw) DO UPDATE SET stamp = excluded.stamp",
            (gw, stamp),
        )

    def read_matching(
        self, gateway_id: str, lookups: Sequence[tuple[str, Sequence[str]]], keys: Sequence[RowKey]
    ) -> Page | None:
        """See :meth:`HotLog.read_matching`."""
        with self._snapshot() as conn:
            built = self._fetch(
                conn,
                "SELECT b.stamp FROM row_index_built b JOIN gateway_rules r ON r.gw = b.gw"
                " WHERE b.gw = ? AND b.stamp = r.stamp",
                (gateway_id,),
            )
            if not built:
                return None
            found: dict[RowKey, None] = dict.fromkeys(keys)
            for col, vals in lookups:
                for i in range(0, len(vals), 500):
                    chunk = list(vals[i : i + 500])
                    marks = ",".join("?" * len(chunk))
                    for t, r in self._fetch(
                        conn,
                        "SELECT tbl, row_id FROM row_index WHERE gw = ? AND col = ?"
                        f" AND val IN ({marks})",
                        (gateway_id, col, *chunk),
                    ):
                        found[(str(t), str(r))] = None
            rows = self._rows(conn, gateway_id, list(found))
            return Page([], rows, self._head(conn), False)

    def row_ids(self, gateway_id: str, table: str, after: str | None, limit: int) -> list[str]:
        """See :meth:`HotLog.row_ids`."""
        query = "SELECT row_id FROM row_state WHERE gw = ? AND tbl = ?"
        params: list[Any] = [gateway_id, table]
        if after is not None:
            query += " AND row_id > ?"
            params.append(after)
        with self._connection() as conn:
            raw = self._fetch(conn, query + " ORDER BY row_id LIMIT ?", (*params, limit))
        return [str(r) for (r,) in raw]

    def rows_written_by(self, gateway_id: str, client_id: str) -> list[RowKey]:
        """See :meth:`HotLog.rows_written_by` (also those whose entries were trimmed)."""
        with self._connection() as conn:
            raw = self._fetch(
                conn,
                "SELECT tbl, row_id FROM log WHERE gw = ? AND client_id = ?"
                " UNION SELECT tbl, row_id FROM trimmed_writers WHERE gw = ? AND client_id = ?",
                (gateway_id, client_id, gateway_id, client_id),
            )
        return [(str(t), str(r)) for t, r in raw]

    def rows_written_among(
        self, gateway_id: str, client_id: str, keys: Sequence[RowKey]
    ) -> set[RowKey]:
        """See :meth:`HotLog.rows_written_among` (also those whose entries were trimmed)."""
        if not keys:
            return set()
        with self._connection() as conn:
            # The log first: trimming moves entries from it to trimmed_writers, never back, so
            # two reads in this order miss none even without one snapshot.
            found = self._written_among(conn, gateway_id, client_id, keys)
            trimmed = self._by_keys(
                conn,
                "SELECT tbl, row_id FROM trimmed_writers"
                " WHERE gw = ? AND client_id = ? AND tbl = ? AND row_id IN",
                (gateway_id, client_id),
                keys,
            )
        return found | {(str(t), str(r)) for t, r in trimmed}

    def head(self) -> int:
        """See :meth:`HotLog.head`."""
        with self._connection() as conn:
            return self._head(conn)

    # -- flusher --------------------------------------------------------------------------------
    def read_log(
        self, after: int, limit: int, gateway_id: str | None = None
    ) -> list[tuple[int, str, RowDelta]]:
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

    # -- checkpoints and trimming ---------------------------------------------------------------
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
            if len(raw) == limit:
                bound = int(raw[-1][0])
            if bound <= cp.trimmed:
                return 0
            self._keep_trimmed(conn, gateway_id, [body for _, body in raw])
            # The horizon moves in the same transaction as the deletion: a pull that read before
            # it and checks the horizon after its read never misses what was deleted.
            self._execute(
                conn, "UPDATE checkpoints SET trimmed = ? WHERE gw = ?", (bound, gateway_id)
            )
            return self._execute(
                conn, "DELETE FROM log WHERE gw = ? AND ingest <= ?", (gateway_id, bound)
            )

        return self._write(op)

    def trimmed_through(self, gateway_id: str) -> int:
        """See :meth:`HotLog.trimmed_through`."""
        cp = self.checkpoint(gateway_id)
        return 0 if cp is None else cp.trimmed

    # -- documents ------------------------------------------------------------------------------
    def get_rules(self, gateway_id: str) -> RulesRecord:
        """See :meth:`HotLog.get_rules`."""
        with self._connection() as conn:
            return self._rules_record(conn, gateway_id)

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
            if raw:  # a store from before versions were kept: keep the version being replaced
                self._execute(
                    conn,
                    "INSERT INTO rules_history (gw, stamp, rules) VALUES (?, ?, ?)"
                    " ON CONFLICT (gw, stamp) DO NOTHING",
                    (gateway_id, int(raw[0][1]), raw[0][0]),
                )
            stamp = self._stamp(conn)
            self._execute(
                conn,
                "INSERT INTO gateway_rules (gw, rules, stamp) VALUES (?, ?, ?)"
                " ON CONFLICT (gw) DO UPDATE SET rules = excluded.rules, stamp = excluded.stamp",
                (gateway_id, body, stamp),
            )
            self._execute(
                conn,
                "INSERT INTO rules_history (gw, stamp, rules) VALUES (?, ?, ?)",
                (gateway_id, stamp, body),
            )
            self._rebuild_index(conn, gateway_id, rules, stamp)
            return RulesRecord(rules, stamp)

        return self._write(op)

    def put_doc(self, gateway_id: str, kind: str, name: str, body: dict[str, Any]) -> None:
        """See :meth:`HotLog.put_doc`."""
        self._write(lambda conn: self._save_doc(conn, gateway_id, kind, name, body))

    def update_doc(
        self,
        gateway_id: str,
        kind: str,
        name: str,
        change: Callable[[dict[str, Any] | None], dict[str, Any]],
    ) -> dict[str, Any]:
        """See :meth:`HotLog.update_doc`."""

        def op(conn: C) -> dict[str, Any]:
            # Under the writers' lock: a row lock alone would let two first registrations race.
            self._lock(conn)
            raw = self._fetch(
                conn,
                "SELECT body FROM gateway_docs WHERE gw = ? AND kind = ? AND name = ?",
                (gateway_id, kind, name),
            )
            body = change(msgspec.json.decode(raw[0][0]) if raw else None)
            self._save_doc(conn, gateway_id, kind, name, body)
            return body

        return self._write(op)

    def _save_doc(self, conn: C, gw: str, kind: str, name: str, body: dict[str, Any]) -> None:
        self._execute(
            conn,
            "INSERT INTO gateway_docs (gw, kind, name, body) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (gw, kind, name) DO UPDATE SET body = excluded.body",
            (gw, kind, name, msgspec.json.encode(body)),
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

    def delete_docs(
        self, gateway_id: str, kind: str, expired: Callable[[dict[str, Any]], bool]
    ) -> int:
        """See :meth:`HotLog.delete_docs`."""

        def op(conn: C) -> int:
            self._lock(conn)  # as update_doc: no claim slips between the read and the delete
            raw = self._fetch(
                conn,
                "SELECT name, body FROM gateway_docs WHERE gw = ? AND kind = ?",
                (gateway_id, kind),
            )
            names = [n for n, body in raw if expired(msgspec.json.decode(body))]
            for name in names:
                self._execute(
                    conn,
                    "DELETE FROM gateway_docs WHERE gw = ? AND kind = ? AND name = ?",
                    (gateway_id, kind, name),
                )
            return len(names)

        return self._write(op)

    def view_stamp(
        self, gateway_id: str, client_id: str, claims_hash: str, claims: Mapping[str, Any]
    ) -> int:
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
            self._execute(
                conn,
                "INSERT INTO claims_history (gw, client_id, stamp, claims) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (gw, client_id, stamp) DO UPDATE SET claims = excluded.claims",
                (gateway_id, client_id, stamp, msgspec.json.encode(dict(claims))),
            )
            return stamp

        return self._write(op)

    def view_history(
        self, gateway_id: str, client_id: str, since: int
    ) -> tuple[list[tuple[int, SyncRules | None]], list[tuple[int, dict[str, Any]]]]:
        """See :meth:`HotLog.view_history`."""
        with self._snapshot() as conn:
            rules = self._fetch(
                conn,
                "SELECT stamp, rules FROM rules_history WHERE gw = ? AND stamp >= coalesce("
                "(SELECT max(stamp) FROM rules_history WHERE gw = ? AND stamp <= ?), 0)"
                " ORDER BY stamp",
                (gateway_id, gateway_id, since),
            )
            if not rules:  # a store from before rules versions were kept: the current ones
                rules = self._fetch(
                    conn, "SELECT stamp, rules FROM gateway_rules WHERE gw = ?", (gateway_id,)
                )
            claims = self._fetch(
                conn,
                "SELECT stamp, claims FROM claims_history WHERE gw = ? AND client_id = ?"
                " AND stamp >= coalesce((SELECT max(stamp) FROM claims_history"
                " WHERE gw = ? AND client_id = ? AND stamp <= ?), 0) ORDER BY stamp",
                (gateway_id, client_id, gateway_id, client_id, since),
            )
        return (
            [(int(st), decode_rules(body)) for st, body in rules],
            [(int(st), msgspec.json.decode(body)) for st, body in claims],
        )

    def _view(self, conn: C, gw: str, client_id: str) -> tuple[str, int] | None:
        """The recorded claims hash of a client and its stamp (None for a client never seen)."""
        raw = self._fetch(
            conn,
            "SELECT claims_hash, stamp FROM client_views WHERE gw = ? AND client_id = ?",
            (gw, client_id),
        )
        return (str(raw[0][0]), int(raw[0][1])) if raw else None
