"""Rows of the replica: remote states, the visible rows over pending writes, local writes and
remote deltas (see :mod:`lakesync.client._store` for the rules)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import msgspec

from lakesync.client._columns import python_row, sql_converter, wire_values
from lakesync.client._replica import (
    _IN_CHUNK,
    _ROWS_COLUMNS,
    ReplicaFile,
    _hlc_in,
    _hlc_out,
    _insert_rows,
)
from lakesync.client._schemas import ReplicaSchemas
from lakesync.client._sql import delete_row, select_in
from lakesync.client._types import Change, Origin
from lakesync.client.errors import RowExistsError, RowNotFoundError, ValidationError
from lakesync.delta import Op, RowDelta, extract_delta, is_view_eviction, validate_row_id
from lakesync.errors import ClockDriftError
from lakesync.hlc import HLC
from lakesync.merge import (
    RowState,
    apply_delta,
    decode_row_state,
    encode_row_state_binary,
    join_delta,
)
from lakesync.schema import check_delta
from lakesync.wire import decode_delta, encode_delta


class _Touched(msgspec.Struct, gc=False):
    """A row changed inside one transaction: its acknowledged state, the visible row before and
    after, and the base of the last view eviction applied to it (untracked by the cyclic GC: a
    page makes thousands, and collections over them cost a bulk apply more than the merge)."""

    state: RowState
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    base: int | None = None


def _with_pending(state: RowState, pending: Sequence[RowDelta]) -> RowState:
    """The merge of an acknowledged row state and the row's pending deltas (a copy if any)."""
    if not pending:
        return state
    merged = RowState(dict(state.cells), state.write, state.tombstone)
    for d in pending:
        join_delta(merged, d)
    return merged


class ReplicaRows:
    """The replica's rows: merged row states, local writes and remote deltas."""

    def __init__(self, file: ReplicaFile, tables: ReplicaSchemas) -> None:
        self._file = file
        self._tables = tables

    # -- row states -----------------------------------------------------------------------

    def _load(
        self,
        c: sqlite3.Connection,
        keys: Iterable[tuple[str, str]],
        bases: dict[tuple[str, str], int] | None = None,
    ) -> dict[tuple[str, str], RowState]:
        """The remote states of many rows (empty states for rows never seen), a few queries;
        their view eviction bases go to ``bases`` when given."""
        by_table: dict[str, list[str]] = {}
        for table, row_id in keys:
            by_table.setdefault(table, []).append(row_id)
        states: dict[tuple[str, str], RowState] = {}
        for table, ids in by_table.items():
            # A checkpoint frame's rows come in key order, after the frames before it: one range
            # probe (SQLite orders text as Python orders str) spares the look-ups of rows that
            # this replica cannot hold yet.
            held = len(ids) == 1 or c.execute(
                "SELECT 1 FROM _ls_rows WHERE tbl = ? AND row_id BETWEEN ? AND ? LIMIT 1",
                (table, min(ids), max(ids)),
            ).fetchone() is not None
            for i in range(0, len(ids) if held else 0, _IN_CHUNK):
                chunk = ids[i : i + _IN_CHUNK]
                for rid, state, vb in c.execute(
                    select_in("_ls_rows", ("row_id", "state", "view_base"), len(chunk)),
                    (table, *chunk),
                ):
                    states[(table, rid)] = decode_row_state(state)
                    if bases is not None and vb is not None:
                        bases[(table, rid)] = _hlc_out(vb)
            for rid in ids:
                states.setdefault((table, rid), RowState())
        return states

    def _pending(
        self, c: sqlite3.Connection, keys: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], list[RowDelta]]:
        """The pending outbox deltas of the given rows, in write order (rows without are absent)."""
        if c.execute("SELECT 1 FROM _ls_outbox LIMIT 1").fetchone() is None:
            return {}  # the common case: nothing waits for the gateway
        by_table: dict[str, list[str]] = {}
        for table, row_id in keys:
            by_table.setdefault(table, []).append(row_id)
        out: dict[tuple[str, str], list[RowDelta]] = {}
        for table, ids in by_table.items():
            for i in range(0, len(ids), _IN_CHUNK):
                chunk = ids[i : i + _IN_CHUNK]
                for rid, body in c.execute(
                    select_in("_ls_outbox", ("row_id", "body"), len(chunk), "seq"),
                    (table, *chunk),
                ):
                    out.setdefault((table, rid), []).append(decode_delta(bytes(body)))
        return out

    def _save_state(
        self, c: sqlite3.Connection, touched: Mapping[tuple[str, str], _Touched]
    ) -> None:
        """Write back acknowledged states, one encoded :class:`RowState` per row."""
        _insert_rows(
            c,
            "_ls_rows",
            _ROWS_COLUMNS,
            [
                (
                    table,
                    row_id,
                    encode_row_state_binary(t.state),
                    None if t.base is None else _hlc_in(t.base),
                )
                for (table, row_id), t in touched.items()
            ],
            replace=True,
        )

    def _show(self, c: sqlite3.Connection, touched: Mapping[tuple[str, str], _Touched]) -> None:
        """Write the visible rows of ``touched`` to the user tables."""
        upserts: dict[str, list[tuple[Any, ...]]] = {}
        deletes: dict[str, list[tuple[str]]] = {}
        columns: dict[str, list[tuple[str, Callable[[Any], Any]]]] = {}
        for (table, row_id), t in touched.items():
            after = t.after
            if after is None:
                if t.before is not None:
                    deletes.setdefault(table, []).append((row_id,))
                continue
            convert = columns.get(table)
            if convert is None:
                convert = columns[table] = [
                    (n, sql_converter(spec))
                    for n, spec in self._tables.schema(table).column_specs().items()
                ]
            # The full row is rewritten so a revived row reads its pre-tombstone cells as null.
            upserts.setdefault(table, []).append(
                (row_id, *[f(after.get(n)) for n, f in convert])
            )
        for table, rows in deletes.items():
            c.executemany(delete_row(table), rows)
        for table, rows in upserts.items():
            names = ("row_id", *(n for n, _ in columns[table]))
            _insert_rows(c, table, names, rows, replace=True)

    def refill(self, c: sqlite3.Connection, table: str) -> None:
        """Write every visible row of ``table`` to its SQL table again."""
        ids = {
            str(r)
            for (r,) in c.execute(
                "SELECT row_id FROM _ls_rows WHERE tbl = ? UNION"
                " SELECT row_id FROM _ls_outbox WHERE tbl = ?",
                (table, table),
            )
        }
        keys = [(table, r) for r in ids]
        states, pending = self._load(c, keys), self._pending(c, keys)
        self._show(c, {
            key: _Touched(
                RowState(), None, _with_pending(states[key], pending.get(key, ())).visible()
            )
            for key in keys
        })

    def merged(self, c: sqlite3.Connection, table: str, row_id: str) -> RowState:
        key = (table, row_id)
        return _with_pending(self._load(c, [key])[key], self._pending(c, [key]).get(key, ()))

    def row_state(self, table: str, row_id: str) -> RowState:
        """The merge state of one row as the replica shows it: acknowledged plus pending."""
        with self._file.lock:
            return self.merged(self._file.conn, table, row_id)

    def get(self, table: str, row_id: str) -> dict[str, Any] | None:
        """The visible columns of one row as Python values, or None when it is absent."""
        visible = self.row_state(table, row_id).visible()
        return python_row(self._tables.schema(table).column_specs(), visible)

    def _change(
        self,
        table: str,
        row_id: str,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        origin: Origin,
    ) -> Change:
        """A row change for watchers, in Python values (the replica merges wire values)."""
        specs = self._tables.schema(table).column_specs()
        return Change(table, row_id, python_row(specs, before), python_row(specs, after), origin)

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
        schema = self._tables.schema(table)
        validate_row_id(row_id, "row_id")
        if not isinstance(values, Mapping):
            raise ValidationError("values must be a mapping of column name to value")
        # The deltaId covers the canonical wire values, so they are encoded before it is made.
        values = wire_values(schema.column_specs(), values)
        with self._file.tx() as c:
            state = self.merged(c, table, row_id)
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
            # The acknowledged state stays as it is: the write is pending until the gateway acks.
            change = apply_delta(RowState(dict(state.cells), state.write, state.tombstone), delta)
            self._show(c, {(table, row_id): _Touched(state, before, change.after)})
            c.execute(
                "INSERT INTO _ls_outbox (delta_id, body, tbl, row_id) VALUES (?, ?, ?, ?)",
                (delta.delta_id, encode_delta(delta), table, row_id),
            )
            self._file.put_meta(c, "hlc", str(clock.last))
        return delta, self._change(table, row_id, change.before, change.after, "local")

    # -- remote deltas --------------------------------------------------------------------

    def apply_remote(
        self,
        deltas: Sequence[RowDelta],
        origin: Origin,
        clock: HLC,
        cursor: tuple[str, int] | None = None,
        mark: bool = False,
        watched: Callable[[], bool] | None = None,
        checkpoint_at: int | None = None,
    ) -> list[Change]:
        """Merge remote deltas into the replica in one transaction, with the cursor if given.

        A delta never overwrites a cell holding a newer write and keeps every cell it wins;
        an INSERT of an existing row merges into it, an UPDATE of a deleted row revives it only
        if it beats the tombstone (docs/protocol.md §4); a view eviction forgets the row's
        acknowledged state. Pending local writes are merged over the result. ``cursor`` is
        ``(gateway_id, server_hlc)``; ``mark`` records the rows as sent by a re-sync in progress
        (:meth:`begin_resync`). ``watched``, when given, is asked in the transaction whether
        anyone watches the replica: if not, no changes are built (none are returned).
        ``checkpoint_at`` marks the deltas as a checkpoint frame at that position: they come
        without view evictions (docs/protocol.md §12), so a row whose last view eviction is
        newer than the position (a broadcast applied while the checkpoint downloads) keeps
        what it holds, as the frame's older eviction would have made it.
        """
        with self._file.tx() as c:
            deltas = self._tables.learn_all(c, deltas)
            keys = {(d.table, d.row_id) for d in deltas}
            if mark:
                c.executemany("INSERT OR IGNORE INTO temp._ls_resync VALUES (?, ?)", keys)
            confirmed = self.confirmed(c, cursor[1]) if cursor is not None else {}
            bases: dict[tuple[str, str], int] = {}
            states = self._load(c, keys, bases)
            pending = self._pending(c, keys)
            touched: dict[tuple[str, str], _Touched] = {}
            stale: set[tuple[str, str]] = set()
            for delta in deltas:
                key = (delta.table, delta.row_id)
                if key in stale:
                    continue
                t = touched.get(key)
                if t is None:
                    base = bases.get(key)
                    if checkpoint_at is not None and base is not None and base > checkpoint_at:
                        stale.add(key)  # a newer snapshot of the row came by broadcast
                        continue
                    if key in confirmed:
                        before = confirmed.pop(key, None)
                    elif key in pending or states[key].write is not None:
                        before = _with_pending(states[key], pending.get(key, ())).visible()
                    else:
                        before = None  # a row this replica never held (no write, no pending)
                    state = states[key]
                    t = touched[key] = _Touched(state, before, None, base)
                if is_view_eviction(delta):
                    if t.base is not None and delta.hlc <= t.base:
                        stale.add(key)  # overtaken by a newer snapshot of the row
                        continue
                    t.state, t.base = RowState(), delta.hlc
                    continue
                join_delta(t.state, delta)
            for key, t in touched.items():
                t.after = _with_pending(t.state, pending.get(key, ())).visible()
            self._save_state(c, touched)
            self._show(c, touched)
            # A first sync of a million rows usually has no watch: building a Change per row
            # (each converted to Python values) would cost a tenth of its time for nothing.
            changes = (
                [
                    self._change(table, row_id, t.before, t.after, origin)
                    for (table, row_id), t in touched.items()
                    if t.before != t.after
                ]
                if watched is None or watched()
                else []
            )
            changes += self.reshow(c, confirmed, origin)
            if cursor is not None:
                c.execute(
                    "INSERT INTO _ls_cursors (gateway_id, server_hlc) VALUES (?, ?) "
                    "ON CONFLICT(gateway_id) DO UPDATE SET server_hlc = excluded.server_hlc",
                    (cursor[0], _hlc_in(cursor[1])),
                )
            if deltas:
                self._observe(clock, max(d.hlc for d in deltas))
                self._file.put_meta(c, "hlc", str(clock.last))
        return changes

    def begin_resync(self) -> None:
        """Start a re-sync from a checkpoint: the rows it sends are marked (``mark=True``) so
        :meth:`finish_resync` can forget every other row. The marks live in a temporary table:
        a crash forgets them, and the cursor still says to start over."""
        with self._file.tx() as c:
            c.execute(
                "CREATE TEMP TABLE IF NOT EXISTS _ls_resync"
                " (tbl TEXT NOT NULL, row_id TEXT NOT NULL, PRIMARY KEY (tbl, row_id))"
            )
            c.execute("DELETE FROM temp._ls_resync")

    def finish_resync(self, gateway_id: str, server_hlc: int, clock: HLC) -> list[Change]:
        """End a re-sync: forget the remote state of every row the checkpoint did not send
        (it left this client's view, or the gateway no longer has it); each such row then shows
        only its pending writes. The cursor moves to ``server_hlc`` in the same transaction."""
        with self._file.tx() as c:
            stale = [
                (str(t), str(r))
                for t, r in c.execute(
                    "SELECT tbl, row_id FROM _ls_rows WHERE NOT EXISTS (SELECT 1 FROM"
                    " temp._ls_resync m WHERE m.tbl = _ls_rows.tbl AND m.row_id = _ls_rows.row_id)"
                )
            ]
            befores = {k: self.merged(c, *k).visible() for k in stale}
            c.executemany("DELETE FROM _ls_rows WHERE tbl = ? AND row_id = ?", stale)
            c.execute("DELETE FROM temp._ls_resync")
            changes = self.reshow(c, befores, "remote")
        return changes + self.apply_remote([], "remote", clock, (gateway_id, server_hlc))

    def confirmed(
        self, c: sqlite3.Connection, cursor: int
    ) -> dict[tuple[str, str], dict[str, Any] | None]:
        """Drop acknowledged outbox entries a pull up to ``cursor`` has sent back; returns the
        visible rows of their rows from before (to recompute them)."""
        rows = c.execute(
            "SELECT seq, tbl, row_id FROM _ls_outbox WHERE acked IS NOT NULL AND acked <= ?",
            (_hlc_in(cursor),),
        ).fetchall()
        if not rows:
            return {}
        befores = {(t, r): self.merged(c, t, r).visible() for _, t, r in rows}
        c.executemany("DELETE FROM _ls_outbox WHERE seq = ?", [(seq,) for seq, _, _ in rows])
        return befores

    @staticmethod
    def _observe(clock: HLC, remote: int) -> None:
        # Later local writes must sort after what this replica has seen; a remote clock too
        # far ahead is the gateway's problem to reject, not a reason to refuse the page.
        try:
            clock.recv(remote)
        except ClockDriftError:
            clock.now()

    def reshow(
        self,
        c: sqlite3.Connection,
        befores: Mapping[tuple[str, str], dict[str, Any] | None],
        origin: Origin,
    ) -> list[Change]:
        """Recompute the visible rows of ``befores`` after their pending writes changed."""
        if not befores:
            return []
        touched = {
            key: _Touched(RowState(), before, self.merged(c, *key).visible())
            for key, before in befores.items()
        }
        self._show(c, touched)
        return [
            self._change(t, r, x.before, x.after, origin)
            for (t, r), x in touched.items()
            if x.before != x.after
        ]

    def cursor(self, gateway_id: str) -> int:
        """The server ingest HLC this replica has pulled up to (0 = never pulled)."""
        with self._file.lock:
            row = self._file.conn.execute(
                "SELECT server_hlc FROM _ls_cursors WHERE gateway_id = ?", (gateway_id,)
            ).fetchone()
        return 0 if row is None else _hlc_out(int(row[0]))

    @staticmethod
    def pulled_to(c: sqlite3.Connection) -> int:
        """The greatest cursor (a replica syncs with one gateway: that one counts)."""
        row = c.execute("SELECT max(server_hlc) FROM _ls_cursors").fetchone()
        return 0 if row is None or row[0] is None else _hlc_out(int(row[0]))
