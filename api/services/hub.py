"""WebSocket fan-out: which sockets are connected to which gateway, and broadcasting to them.

A broadcast goes to every other connection of the gateway (never back to the sender), filtered
by each receiver's rules with :func:`api.services.views.page_view`. Each connection has a
bounded outbox drained by its own task, so one slow socket never delays the others; a socket
whose outbox overflows is closed (1013, try again later) and must resync by pull.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from api.services.views import RowHistory, SnapshotCache, effective_rules, page_view
from api.store.base import LogEntry, RowKey, RowRecord, RulesRecord
from lakesync.wsframes import encode_response

__all__ = ["Connection", "Hub"]

_OUTBOX = 1024


@dataclass(eq=False)
class Connection:
    """One authenticated WebSocket: its gateway, claims and outbox."""

    gateway_id: str
    client_id: str
    claims: Mapping[str, Any]
    view_stamp: int
    send: Callable[[bytes], Awaitable[None]]
    close: Callable[[int, str], Awaitable[None]]
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
    """The registry of open connections of one app, by gateway."""

    def __init__(self, max_connections: int) -> None:
        self.max_connections = max_connections
        self._by_gw: dict[str, set[Connection]] = {}
        self._closing: set[asyncio.Future[None]] = set()

    @property
    def count(self) -> int:
        """Open connections across all gateways."""
        return sum(len(s) for s in self._by_gw.values())

    def count_for(self, gateway_id: str) -> int:
        """Open connections of one gateway."""
        return len(self._by_gw.get(gateway_id, ()))

    def full(self) -> bool:
        """Whether the connection cap is reached."""
        return self.count >= self.max_connections

    def add(self, conn: Connection) -> None:
        """Register a connection and start its sender."""
        self._by_gw.setdefault(conn.gateway_id, set()).add(conn)
        conn.task = asyncio.create_task(conn.drain())

    async def remove(self, conn: Connection) -> None:
        """Unregister a connection and stop its sender."""
        self._by_gw.get(conn.gateway_id, set()).discard(conn)
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
        shared = b""
        if raw:
            shared = encode_response([e.delta for e in entries], server_hlc, False, True)
        for conn in targets:
            if raw:
                frame = shared
            else:
                deltas = page_view(
                    entries,
                    rows,
                    effective_rules(rules.rules, conn.claims),
                    conn.claims,
                    max(rules.stamp, conn.view_stamp),
                    raw=False,
                    cache=cache,
                    history=history,
                )
                if not deltas:
                    continue  # nothing this receiver may see
                frame = encode_response(deltas, server_hlc, False, True)
            try:
                conn.outbox.put_nowait(frame)
            except asyncio.QueueFull:
                task = asyncio.ensure_future(conn.close(1013, "too slow: resync by pull"))
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
