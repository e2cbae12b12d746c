"""A gateway's sync rules on SQL (:class:`~lakesync.hotlog.ports.RulesStore`): every version
is kept (:mod:`.views` reads them) and a change rebuilds the filter-column index."""

from __future__ import annotations

from lakesync.hotlog._sql.core import C
from lakesync.hotlog._sql.index import SqlRulesIndex
from lakesync.hotlog.base import RulesRecord, encode_rules
from lakesync.hotlog.ports import RulesStore
from lakesync.rules import SyncRules

__all__ = ["SqlRulesStore"]


class SqlRulesStore(SqlRulesIndex[C], RulesStore):
    """:class:`RulesStore` over the shared SQL tables."""

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
