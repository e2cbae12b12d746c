"""Gateway documents on SQL (:class:`~lakesync.hotlog.ports.DocumentStore`); a
read-modify-write holds the writers' lock, so no update is lost."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from lakesync.hotlog._sql.core import C, SqlCore
from lakesync.hotlog.ports import DocumentStore

__all__ = ["SqlDocumentStore"]


class SqlDocumentStore(SqlCore[C], DocumentStore):
    """:class:`DocumentStore` over the shared SQL tables."""

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
