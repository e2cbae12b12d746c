"""The rules' filter-column index: which rows each filter value finds, kept for the current
rules of every gateway by the log's appends (:mod:`.log`) and rebuilt by a rules change
(:mod:`.rules`)."""

from __future__ import annotations

from lakesync.hotlog._sql.core import C, SqlCore
from lakesync.hotlog.base import RowKey, RulesRecord, decode_rules, decode_state
from lakesync.merge import RowState
from lakesync.rules import SyncRules, index_entries

__all__ = ["SqlRulesIndex"]


class SqlRulesIndex(SqlCore[C]):
    """The current rules of a gateway as the index follows them, and the index's upkeep."""

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
