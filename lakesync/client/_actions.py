"""The action outbox: actions the app asked for, kept in the replica's SQLite file until the
gateway gives each a final answer.

:meth:`ActionOutbox.enqueue` commits an action (with its idempotency key, by default its own
id) before anything is sent, so a crash or an offline spell never loses it; :func:`send_actions`
sends what is pending and records each final answer (a success, or a failure the gateway says
will not pass on a retry). A retryable failure stays pending and is sent again, under the same
idempotency key, so the gateway runs it at most once however often it is sent.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lakesync.client._store import LocalStore
from lakesync.client._types import Event
from lakesync.client.transport import AsyncTransport

__all__ = ["ActionOutbox", "ActionRecord", "send_actions"]

_DDL = """
CREATE TABLE IF NOT EXISTS _ls_actions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, action_id TEXT NOT NULL UNIQUE,
    connector TEXT NOT NULL, action_type TEXT NOT NULL, params TEXT NOT NULL,
    idempotency_key TEXT NOT NULL, state TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0, result TEXT, last_error TEXT, created_at REAL NOT NULL);
"""

_COLUMNS = "action_id, connector, action_type, params, idempotency_key, state, attempts, result"


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """An action and where it stands: ``pending``, ``succeeded`` or ``failed`` (for good);
    ``result`` is the gateway's answer (``data``, or ``code`` / ``message`` / ``retryable``)."""

    action_id: str
    connector: str
    action_type: str
    params: dict[str, Any]
    idempotency_key: str
    state: str
    attempts: int
    result: dict[str, Any] | None


def _record(row: tuple[Any, ...]) -> ActionRecord:
    aid, connector, kind, params, key, state, attempts, result = row
    decoded = None if result is None else json.loads(result)
    return ActionRecord(aid, connector, kind, json.loads(params), key, state, attempts, decoded)


class ActionOutbox:
    """The ``_ls_actions`` table of a replica (thread-safe through the store's lock)."""

    def __init__(self, store: LocalStore) -> None:
        self.store = store
        with store.lock:
            store.conn.executescript(_DDL)

    def enqueue(
        self,
        connector: str,
        action_type: str,
        params: Mapping[str, Any],
        idempotency_key: str | None = None,
    ) -> str:
        """Store an action durably; returns its id."""
        action_id = uuid.uuid4().hex
        with self.store.tx() as c:
            c.execute(
                "INSERT INTO _ls_actions (action_id, connector, action_type, params,"
                " idempotency_key, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    action_id,
                    connector,
                    action_type,
                    json.dumps(dict(params)),
                    idempotency_key or action_id,
                    time.time(),
                ),
            )
        return action_id

    def pending(self, limit: int = 100) -> list[ActionRecord]:
        """The oldest actions without a final answer."""
        with self.store.lock:
            rows = self.store.conn.execute(
                f"SELECT {_COLUMNS} FROM _ls_actions WHERE state = 'pending' ORDER BY seq LIMIT ?",
                (limit,),
            ).fetchall()
        return [_record(r) for r in rows]

    def get(self, action_id: str) -> ActionRecord | None:
        """One action, or None if unknown."""
        with self.store.lock:
            row = self.store.conn.execute(
                f"SELECT {_COLUMNS} FROM _ls_actions WHERE action_id = ?", (action_id,)
            ).fetchone()
        return None if row is None else _record(row)

    def settle(self, action_id: str, result: Mapping[str, Any]) -> None:
        """Record a final answer."""
        state = "succeeded" if result.get("code") is None else "failed"
        with self.store.tx() as c:
            c.execute(
                "UPDATE _ls_actions SET state = ?, result = ?, attempts = attempts + 1"
                " WHERE action_id = ?",
                (state, json.dumps(dict(result)), action_id),
            )

    def retry_later(self, action_id: str, error: str) -> None:
        """Count a failed attempt; the action stays pending."""
        with self.store.tx() as c:
            c.execute(
                "UPDATE _ls_actions SET attempts = attempts + 1, last_error = ?"
                " WHERE action_id = ?",
                (error, action_id),
            )


async def send_actions(
    outbox: ActionOutbox,
    transport: AsyncTransport,
    client_id: str,
    emit: Callable[[Event], None],
) -> int:
    """Send the oldest pending actions once; returns how many of them stay pending. Each final
    answer is recorded and reported as an ``action_complete`` event. Raises the transport's
    error when the gateway cannot be reached (the actions stay pending)."""
    batch = outbox.pending()
    if not batch:
        return 0
    wire = [
        {
            "actionId": a.action_id,
            "connector": a.connector,
            "actionType": a.action_type,
            "params": a.params,
            "idempotencyKey": a.idempotency_key,
        }
        for a in batch
    ]
    results = {r["actionId"]: r for r in await transport.actions(client_id, wire)}
    waiting = 0
    for a in batch:
        result = results.get(a.action_id)
        if result is None or result.get("retryable"):
            message = "no result" if result is None else str(result.get("message"))
            outbox.retry_later(a.action_id, message)
            waiting += 1
            continue
        outbox.settle(a.action_id, result)
        ok = result.get("code") is None
        emit(
            Event(
                "action_complete",
                f"{a.connector}.{a.action_type} "
                f"{'succeeded' if ok else 'failed: ' + str(result.get('message'))}",
                {
                    "action_id": a.action_id,
                    "connector": a.connector,
                    "action_type": a.action_type,
                    "result": result,
                },
            )
        )
    return waiting
