"""WebSocket fan-out: which sockets are connected to which gateway, and broadcasting to them.

A broadcast goes to every other connection of the gateway (never back to the sender), filtered
by each receiver's rules with :func:`lakesync.views.page_view`. Each connection has a
bounded outbox drained by its own task, so one slow socket never delays the others; a socket
whose outbox overflows is closed (1013, try again later) and must resync by pull.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lakesync.api.store.base import LogEntry, RowKey, RowRecord, RulesRecord
from lakesync.views import (
    Reader,
    RowHistory,
    SnapshotCache,
    ViewHistory,
    effective_rules,
    page_view,
)
from lakesync.wsframes import encode_response

__all__ = ["Connection", "Hub"]

_OUTBOX = 1024


@dataclass(eq=False)
class Connection:
    """One authenticated WebSocket: its gateway, claims, whether its client knows no view
    evictions (:attr:`lakesync.views.Reader.whole_rows`) and its outbox."""

    gateway_id: str
    client_id: str
    claims: Mapping[str, Any]
    view_stamp: int
    send: Callable[[bytes], Awaitable[None]]
    close: Callable[[int, str], Awaitable[None]]
    whole_rows: bool
    outbox: asyncio.Queue[bytes] = field(default_factory=lambda: asyncio.Queue(_OUTBOX))
    task: asyncio.Task[None] | None = None
    # Set once the socket is accepted: a connection is registered (and queues broadcasts)
    # before it is accepted, so a client that sees the handshake complete misses nothing.
    accepted: asyncio.Event = field(default_factory=asyncio.Event)

    async def drain(self) -> None:
        """Send queued frames in order (once accepted) until cancelled."""
        await self.accepted.wait()
        while True:
            frame = await self.outbox.get()
            await self.send(frame)


class Hub:
    """The registry of open connections of one app, by gateway, and its connection caps.

    Three caps, each 0 for none: all connections, one gateway's (so one tenant cannot lock the
    others out) and one client's on a gateway (so one token cannot take its gateway's share).
    """

    def __init__(
        self, max_connections: int, max_per_gateway: int = 0, max_per_client: int = 0
    ) -> None:
        self.max_connections = max_connections
        self.max_per_gateway = max_per_gateway
        self.max_per_client = max_per_client
        self._by_gw: dict[str, set[Connection]] = {}
        self._by_client: Counter[tuple[str, str]] = Counter()
        self._closing: set[asyncio.Future[None]] = set()

    @property
    def count(self) -> int:
        """Open connections across all gateways."""
        return sum(len(s) for s in self._by_gw.values())

    def count_for(self, gateway_id: str) -> int:
        """Open connections of one gateway."""
        return len(self._by_gw.get(gateway_id, ()))

    def clients_of(self, gateway_id: str) -> dict[str, int]:
        """Open connections of one gateway by client id."""
        return {c: n for (gw, c), n in self._by_client.items() if gw == gateway_id}

    def refusal(self, gateway_id: str, client_id: str) -> str | None:
        """Why one more connection of ``client_id`` to ``gateway_id`` would pass a cap, or None.

        Call :meth:`add` right after, with no ``await`` between, so that concurrent handshakes
        cannot together overshoot a cap.
        """
        if 0 < self.max_connections <= self.count:
            return "connection limit reached; retry later"
        if 0 < self.max_per_gateway <= self.count_for(gateway_id):
            return f"connection limit of gateway {gateway_id!r} reached; retry later"
        if 0 < self.max_per_client <= self._by_client[(gateway_id, client_id)]:
            return f"client {client_id!r} has too many connections; close one and retry"
        return None

    def add(self, conn: Connection) -> None:
        """Register a connection and start its sender."""
        self._by_gw.setdefault(conn.gateway_id, set()).add(conn)
        self._by_client[(conn.gateway_id, conn.client_id)] += 1
        conn.task = asyncio.create_task(conn.drain())

    async def remove(self, conn: Connection) -> None:
        """Unregister a connection and stop its sender."""
        conns = self._by_gw.get(conn.gateway_id, set())
        if conn in conns:
            conns.discard(conn)
            if not conns:
                del self._by_gw[conn.gateway_id]
            key = (conn.gateway_id, conn.client_id)
            self._by_client[key] -= 1
            if not self._by_client[key]:
                del self._by_client[key]
        if conn.task is not None:
            conn.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await conn.task

    def publish(
        self,
        gateway_id: str,
        entries: list[LogEntry],
        rows: Mapping[RowKey, RowRecord],
        rules: RulesRecord,
        origin: Connection | None,
        cache: SnapshotCache | None = None,
        history: RowHistory | None = None,
    ) -> None:
        """Queue a broadcast of newly stored entries to every other connection of the gateway."""
        targets = [c for c in self._by_gw.get(gateway_id, ()) if c is not origin]
        if not targets or not entries:
            return
        server_hlc = entries[-1].ingest_hlc
        raw = rules.stamp == 0
        deltas = [e.delta for e in entries]
        shared = encode_response(deltas, server_hlc, False, True) if raw else b""
        for conn in targets:
            if raw:
                frame = shared
            else:
                reader = Reader(
                    conn.client_id,
                    conn.claims,
                    effective_rules(rules.rules, conn.claims),
                    max(rules.stamp, conn.view_stamp),
                    entries[0].ingest_hlc - 1,
                    ViewHistory.fixed(rules.rules, conn.claims),
                    whole_rows=conn.whole_rows,
                )
                view = page_view(deltas, rows, reader, False, cache, history)
                if not view:
                    continue  # nothing this receiver may see
                frame = encode_response(view, server_hlc, False, True)
            try:
                conn.outbox.put_nowait(frame)
            except asyncio.QueueFull:
                task = asyncio.ensure_future(conn.close(1013, "too slow: resync by pull"))
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
