"""The history of each client's view on SQL (part of :class:`~lakesync.hotlog.ports.PullLog`):
its claims versions, stamped when they change, next to the rules versions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from lakesync.hotlog._sql.core import C, SqlCore
from lakesync.hotlog.base import decode_rules
from lakesync.rules import SyncRules

__all__ = ["SqlViewHistoryStore"]


class SqlViewHistoryStore(SqlCore[C]):
    """The claims versions of each client over the shared SQL tables."""

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
