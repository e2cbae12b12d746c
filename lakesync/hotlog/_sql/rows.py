"""The merged row states on SQL (parts of the ports :class:`~lakesync.hotlog.ports.PullLog` and
:class:`~lakesync.hotlog.ports.RowLookup`): reads by key, by table, through the rules'
filter-column index, and per row since a cursor; who wrote which row."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

from lakesync.delta import RowDelta
from lakesync.hotlog._batch import history_of
from lakesync.hotlog._sql.core import C, SqlCore
from lakesync.hotlog.base import Page, RowKey, RowRecord, decode_delta, decode_state
from lakesync.merge import RowState

__all__ = ["SqlRowStore"]


class SqlRowStore(SqlCore[C]):
    """The merged row states over the shared SQL tables."""

    @abc.abstractmethod
    def _written_among(
        self, conn: C, gw: str, client_id: str, keys: Sequence[RowKey]
    ) -> set[RowKey]:
        """Those of ``keys`` (not empty) the client has a log entry of, each looked up through
        the log's row index: the work is bounded by the keys, however much the client wrote."""


    def _trimmed_written_among(
        self, conn: C, gw: str, client_id: str, keys: Sequence[RowKey]
    ) -> set[RowKey]:
        """Those of ``keys`` (not empty) among the rows the client wrote whose log entries were
        trimmed (``trimmed_writers``), each probed through its primary key."""
        raw = self._by_keys(
            conn,
            "SELECT tbl, row_id FROM trimmed_writers"
            " WHERE gw = ? AND client_id = ? AND tbl = ? AND row_id IN",
            (gw, client_id),
            keys,
        )
        return {(str(t), str(r)) for t, r in raw}

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

    def read_matching(
        self, gateway_id: str, lookups: Sequence[tuple[str, Sequence[str]]], keys: Sequence[RowKey]
    ) -> Page | None:
        """See :meth:`HotLog.read_matching`."""
        with self._snapshot() as conn:
            found = self._matching(conn, gateway_id, lookups)
            if found is None:
                return None
            rows = self._rows(conn, gateway_id, list(dict.fromkeys([*keys, *found])))
            return Page([], rows, self._head(conn), False)

    def read_relation(
        self, gateway_id: str, table: str, lookups: Sequence[tuple[str, Sequence[str]]] | None
    ) -> dict[RowKey, RowState]:
        """See :meth:`HotLog.read_relation`."""
        with self._snapshot() as conn:
            return self._relation(conn, gateway_id, table, lookups)

    def _relation(
        self, conn: C, gw: str, table: str, lookups: Sequence[tuple[str, Sequence[str]]] | None
    ) -> dict[RowKey, RowState]:
        """:meth:`read_relation` on ``conn`` (an append's write check reads it in its own
        transaction): through the index when it follows the current rules, else the table."""
        found = None if lookups is None else self._matching(conn, gw, lookups)
        if found is None:
            raw = self._fetch(
                conn, "SELECT row_id, state FROM row_state WHERE gw = ? AND tbl = ?", (gw, table)
            )
            return {(table, str(r)): decode_state(s) for r, s in raw}
        keys = [k for k in found if k[0] == table]
        return {k: rec.state for k, rec in self._rows(conn, gw, keys).items()}

    def _matching(
        self, conn: C, gw: str, lookups: Sequence[tuple[str, Sequence[str]]]
    ) -> list[RowKey] | None:
        """The rows the rules' filter-column index finds for ``lookups``; None when the index
        does not follow the gateway's current rules."""
        built = self._fetch(
            conn,
            "SELECT b.stamp FROM row_index_built b JOIN gateway_rules r ON r.gw = b.gw"
            " WHERE b.gw = ? AND b.stamp = r.stamp",
            (gw,),
        )
        if not built:
            return None
        found: dict[RowKey, None] = {}
        for col, vals in lookups:
            for i in range(0, len(vals), 500):
                chunk = list(vals[i : i + 500])
                marks = ",".join("?" * len(chunk))
                for t, r in self._fetch(
                    conn,
                    "SELECT tbl, row_id FROM row_index WHERE gw = ? AND col = ?"
                    f" AND val IN ({marks})",
                    (gw, col, *chunk),
                ):
                    found[(str(t), str(r))] = None
        return list(found)

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
            return found | self._trimmed_written_among(conn, gateway_id, client_id, keys)

    def rows_written_if_few(
        self, gateway_id: str, client_id: str, limit: int
    ) -> set[RowKey] | None:
        """See :meth:`HotLog.rows_written_if_few` (also those whose entries were trimmed)."""
        found: set[RowKey] = set()
        with self._connection() as conn:
            # The log first, as in rows_written_among; each read stops after limit + 1 rows
            # (both go through an index led by (gw, client_id)).
            for query in (
                "SELECT tbl, row_id FROM log WHERE gw = ? AND client_id = ? LIMIT ?",
                "SELECT tbl, row_id FROM trimmed_writers WHERE gw = ? AND client_id = ? LIMIT ?",
            ):
                raw = self._fetch(conn, query, (gateway_id, client_id, limit + 1))
                if len(raw) > limit:
                    return None
                found.update((str(t), str(r)) for t, r in raw)
        return found
