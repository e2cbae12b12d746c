"""WebSocket fan-out: which sockets are connected to which gateway, and broadcasting to them.

A broadcast goes to every other connection of the gateway (never back to the sender), filtered
by each receiver's rules exactly as :func:`lakesync.views.page_view` would. The work is done
per distinct *view*, not per connection: connections are grouped by what decides the rows they
see (:func:`lakesync.views.view_key`, and whether they know view evictions), each group's
deltas are computed once (:class:`lakesync.views.BroadcastView`) and each distinct frame is
encoded once, the same bytes then queued to every subscriber. The views are indexed by the
claim values their rules read, so a batch is computed only for the views that may hear of it
(:func:`lakesync.rules.claim_keys`): a push costs its readers, not the gateway's thousand
views. A gateway without rules encodes one frame for all.

Each connection has a send queue drained by its own task, so one slow socket never delays the
others. The queue is bounded (frames and bytes): a receiver whose queue would overflow is
dropped at once (no more frames are queued for it, its queue is freed) and closed with
:data:`~lakesync.wsframes.CLOSE_TOO_SLOW`; its client reconnects and pulls from its cursor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lakesync.delta import RowDelta
from lakesync.hotlog.base import LogEntry, RowKey, RowRecord, RulesRecord
from lakesync.rules import SyncRules, claim_keys
from lakesync.views import (
    BroadcastView,
    Reader,
    RowHistory,
    SnapshotCache,
    ViewHistory,
    effective_rules,
    view_key,
)
from lakesync.wsframes import CLOSE_TOO_SLOW, encode_response

__all__ = ["SEND_QUEUE_FRAMES", "Connection", "Hub", "broadcast_hlc"]

K = TypeVar("K")

log = logging.getLogger("lakesync.gateway")

SEND_QUEUE_FRAMES = 1024
"""Frames a connection's send queue holds at most (its bytes are bounded by the hub)."""


@dataclass(eq=False)
class Connection:
    """One authenticated WebSocket: its gateway, claims, whether its client knows no view
    evictions (:attr:`lakesync.views.Reader.whole_rows`) and its send queue (``outbox``, with
    ``queued`` bytes in it)."""

    gateway_id: str
    client_id: str
    claims: Mapping[str, Any]
    view_stamp: int
    send: Callable[[bytes], Awaitable[None]]
    close: Callable[[int, str], Awaitable[None]]
    whole_rows: bool
    outbox: asyncio.Queue[bytes] = field(
        default_factory=lambda: asyncio.Queue(SEND_QUEUE_FRAMES)
    )
    queued: int = 0
    task: asyncio.Task[None] | None = None
    # Set once the socket is accepted: a connection is registered (and queues broadcasts)
    # before it is accepted, so a client that sees the handshake complete misses nothing.
    accepted: asyncio.Event = field(default_factory=asyncio.Event)

    async def drain(self) -> None:
        """Send queued frames in order (once accepted) until cancelled."""
        await self.accepted.wait()
        while True:
            frame = await self.outbox.get()
            self.queued -= len(frame)
            await self.send(frame)

    async def reply(self, frame: bytes) -> None:
        """Queue the reply to one of the client's own requests (waits for room: the client
        waits for its reply before its next request)."""
        await self.outbox.put(frame)
        self.queued += len(frame)


@dataclass(eq=False)
class _View:
    """The connections of one gateway that see the same rows, and what a reader of the view
    needs, worked out once from the claims of its first member (any member's would do)."""

    claims: Mapping[str, Any]
    rules: SyncRules | None  # the rules that apply to the view (none for admins)
    history: ViewHistory
    whole_rows: bool
    members: set[Connection] = field(default_factory=set)
    clients: Counter[str] = field(default_factory=Counter)
    # The greatest view stamp a member ever had: members below a batch see it alike.
    max_stamp: int = 0

    def reader(self, client_id: str, stamp: int, since: int) -> Reader:
        """The view's reader of a batch after ``since`` (see :meth:`Hub._readers`)."""
        return Reader(client_id, self.claims, self.rules, stamp, since, self.history,
                      whole_rows=self.whole_rows)


@dataclass(eq=False)
class _Views:
    """A gateway's connections grouped by view under one version of its rules, and indexes of
    the views by the claim values their rules read and by the clients among their members (so
    a batch is computed only for the views that may hear of it: :meth:`reached`)."""

    stamp: int
    rules: SyncRules | None
    groups: dict[Hashable, _View] = field(default_factory=dict)
    everything: set[_View] = field(default_factory=set)  # views without rules (admins)
    by_claim: dict[tuple[str, str], set[_View]] = field(default_factory=dict)
    by_client: dict[str, set[_View]] = field(default_factory=dict)

    def key(self, conn: Connection) -> tuple[bool, Hashable]:
        return (conn.whole_rows, view_key(self.rules, conn.claims))

    def _claims(self, key: tuple[bool, Hashable]) -> list[tuple[str, str]]:
        """The ``(jwt:<claim>, value)`` pairs of a view's key (:func:`view_key`)."""
        view = key[1]
        assert isinstance(view, tuple)
        if view[0]:
            return []
        return [(name, v) for name, values in view[1] for v in values or ()]

    def add(self, conn: Connection) -> None:
        key = self.key(conn)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = _View(
                conn.claims,
                effective_rules(self.rules, conn.claims),
                ViewHistory.fixed(self.rules, conn.claims),
                conn.whole_rows,
            )
            if group.rules is None:
                self.everything.add(group)
            for pair in self._claims(key):
                self.by_claim.setdefault(pair, set()).add(group)
        group.members.add(conn)
        group.clients[conn.client_id] += 1
        self.by_client.setdefault(conn.client_id, set()).add(group)
        group.max_stamp = max(group.max_stamp, conn.view_stamp)

    def discard(self, conn: Connection) -> None:
        key = self.key(conn)
        group = self.groups.get(key)
        if group is None or conn not in group.members:
            return
        group.members.discard(conn)
        group.clients[conn.client_id] -= 1
        if not group.clients[conn.client_id]:
            del group.clients[conn.client_id]
            _unindex(self.by_client, conn.client_id, group)
        if not group.members:
            del self.groups[key]
            self.everything.discard(group)
            for pair in self._claims(key):
                _unindex(self.by_claim, pair, group)

    def reached(self, batch: BroadcastView) -> Collection[_View]:
        """The views that may hear of a batch: those whose claims could see one of its rows
        now or since the cursor (:func:`~lakesync.rules.claim_keys`), those without rules,
        and those with a member whose client wrote a row of it; every view when the rules
        do not narrow a row's readers by a claim."""
        if self.rules is None:
            return list(self.groups.values())
        pairs: set[tuple[str, str]] = set()
        for table, values in batch.states():
            keys = claim_keys(self.rules, table, values)
            if keys is None:
                return list(self.groups.values())
            pairs |= keys
        out = set(self.everything)
        for pair in pairs:
            out |= self.by_claim.get(pair, set())
        for writer in batch.writers:
            out |= self.by_client.get(writer, set())
        return out


def broadcast_hlc(whole_rows: bool, server_hlc: int) -> int:
    """The ``serverHlc`` of a broadcast to a client: 0 for one without view evictions. LakeSync
    v1 moves its cursor to a broadcast's ``serverHlc`` (never back), which would carry it past
    what it has not pulled yet (the rest of a page, the evictions its own push caused); with 0
    it keeps its cursor, and its next pull brings the broadcast's rows again
    (docs/protocol.md §9)."""
    return 0 if whole_rows else server_hlc


def _unindex(index: dict[K, set[_View]], key: K, group: _View) -> None:
    found = index.get(key)
    if found is not None:
        found.discard(group)
        if not found:
            del index[key]


class Hub:
    """The registry of open connections of one app, by gateway, its connection caps and the
    bound of each connection's send queue in bytes (``send_queue_bytes``, 0 for none: the
    queue still holds at most :data:`SEND_QUEUE_FRAMES` frames).

    Three caps, each 0 for none: all connections, one gateway's (so one tenant cannot lock the
    others out) and one client's on a gateway (so one token cannot take its gateway's share).
    """

    def __init__(
        self,
        max_connections: int,
        max_per_gateway: int = 0,
        max_per_client: int = 0,
        send_queue_bytes: int = 0,
        on_drop: Callable[[str], None] | None = None,
    ) -> None:
        self.max_connections = max_connections
        self.on_drop = on_drop
        """Called with the gateway id of each connection dropped for being too slow (the
        gateway counts them in its metrics)."""
        self.max_per_gateway = max_per_gateway
        self.max_per_client = max_per_client
        self.send_queue_bytes = send_queue_bytes
        self._by_gw: dict[str, set[Connection]] = {}
        self._by_client: Counter[tuple[str, str]] = Counter()
        self._views: dict[str, _Views] = {}
        self._closing: set[asyncio.Future[None]] = set()
        self.dropped = 0
        """Connections closed for being too slow, since the hub started."""

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
        views = self._views.get(conn.gateway_id)
        if views is not None:
            views.add(conn)
        conn.task = asyncio.create_task(conn.drain())

    def connections(self, gateway_id: str) -> list[Connection]:
        """The open connections of one gateway."""
        return list(self._by_gw.get(gateway_id, ()))

    def rebind(self, conn: Connection, claims: Mapping[str, Any], stamp: int) -> None:
        """Regroup a connection under the claims its view now binds to (a relation its rules
        read changed: :meth:`lakesync.api.services.sync.SyncService.bind`) and its new view
        stamp."""
        views = self._views.get(conn.gateway_id)
        if views is not None:
            views.discard(conn)
        conn.claims, conn.view_stamp = claims, stamp
        if views is not None and conn in self._by_gw.get(conn.gateway_id, ()):
            views.add(conn)

    def offer(self, conn: Connection, deltas: Sequence[RowDelta], server_hlc: int) -> None:
        """Queue a broadcast of ``deltas`` made for one connection, at the ``serverHlc`` its kind
        of client takes (:func:`broadcast_hlc`), or drop the connection if its queue cannot
        take it."""
        at = broadcast_hlc(conn.whole_rows, server_hlc)
        self._offer(conn, encode_response(deltas, at, False, True))

    async def remove(self, conn: Connection) -> None:
        """Unregister a connection and stop its sender (again for a dropped one: a no-op)."""
        self._forget(conn)
        if conn.task is not None:
            conn.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await conn.task

    def _forget(self, conn: Connection) -> None:
        conns = self._by_gw.get(conn.gateway_id, set())
        if conn not in conns:
            return
        conns.discard(conn)
        if not conns:
            del self._by_gw[conn.gateway_id]
            self._views.pop(conn.gateway_id, None)
        key = (conn.gateway_id, conn.client_id)
        self._by_client[key] -= 1
        if not self._by_client[key]:
            del self._by_client[key]
        views = self._views.get(conn.gateway_id)
        if views is not None:
            views.discard(conn)

    def _grouped(self, gateway_id: str, rules: RulesRecord) -> _Views:
        """The gateway's connections by view under ``rules`` (kept up to date by :meth:`add`
        and :meth:`remove`; regrouped when the rules change)."""
        views = self._views.get(gateway_id)
        if views is None or views.stamp != rules.stamp:
            views = self._views[gateway_id] = _Views(rules.stamp, rules.rules)
            for conn in self._by_gw.get(gateway_id, ()):
                views.add(conn)
        return views

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
        """Queue a broadcast of newly stored entries to every other connection of the gateway:
        computed and encoded once per distinct view, the same bytes queued to its members.

        Each connection gets its broadcasts at :func:`broadcast_hlc`."""
        conns = self._by_gw.get(gateway_id)
        if not conns or not entries:
            return
        server_hlc = entries[-1].ingest_hlc
        deltas = [e.delta for e in entries]
        if rules.stamp == 0:  # never had rules: the log as it is, to everyone
            by_kind: dict[bool, bytes] = {}  # encoded once per kind of client, when needed
            for conn in list(conns):
                if conn is origin:
                    continue
                frame = by_kind.get(conn.whole_rows)
                if frame is None:
                    at = broadcast_hlc(conn.whole_rows, server_hlc)
                    frame = by_kind[conn.whole_rows] = encode_response(deltas, at, False, True)
                self._offer(conn, frame)
            return
        since = entries[0].ingest_hlc - 1
        batch = BroadcastView(deltas, rows, since, cache, history)
        frames: dict[tuple[object, ...], bytes] = {}
        for group in list(self._grouped(gateway_id, rules).reached(batch)):
            for reader, members in self._readers(group, batch, rules.stamp, since):
                view = batch.view(reader)
                if not view:
                    continue  # nothing this view may see
                ident = (reader.whole_rows, *((d.op, d.delta_id) for d in view))
                if ident not in frames:
                    at = broadcast_hlc(reader.whole_rows, server_hlc)
                    frames[ident] = encode_response(view, at, False, True)
                frame = frames[ident]
                for conn in list(members):  # an offer may drop a member
                    if conn is not origin:
                        self._offer(conn, frame)

    @staticmethod
    def _readers(
        group: _View, batch: BroadcastView, rules_stamp: int, since: int
    ) -> list[tuple[Reader, Collection[Connection]]]:
        """One reader per set of a view's members that receive the same deltas: all of them,
        unless some wrote a row of the batch (they may hold rows the others may not) or have
        a view stamp after the cursor (a snapshot's base).

        A reader's stamp only sets the snapshots' base, max(the row's last ingest, stamp), and
        every row of the batch was last ingested after the cursor: stamps up to it act alike.
        """
        common = max(rules_stamp, since)
        if group.max_stamp <= since:
            for w in batch.writers:
                if w in group.clients:
                    break
            else:  # the usual case: one reader for the whole view
                member = next(iter(group.members))
                return [(group.reader(member.client_id, common, since), group.members)]
        subsets: dict[tuple[str | None, int], list[Connection]] = {}
        for conn in group.members:
            writer = conn.client_id if conn.client_id in batch.writers else None
            subsets.setdefault((writer, max(conn.view_stamp, common)), []).append(conn)
        return [
            (group.reader(members[0].client_id, stamp, since), members)
            for (_, stamp), members in subsets.items()
        ]

    def _offer(self, conn: Connection, frame: bytes) -> None:
        """Queue a broadcast frame, or drop the connection if its queue cannot take it."""
        limit = self.send_queue_bytes
        over = 0 < limit < conn.queued + len(frame) and conn.queued > 0
        if conn.outbox.full() or over:
            self._drop(conn)
            return
        conn.outbox.put_nowait(frame)
        conn.queued += len(frame)

    def _drop(self, conn: Connection) -> None:
        """Stop serving a receiver that is too slow: unregister it, free its queue, close it
        with :data:`CLOSE_TOO_SLOW` (the close frame leaves once the socket takes it)."""
        self._forget(conn)
        self.dropped += 1
        if self.on_drop is not None:
            self.on_drop(conn.gateway_id)
        log.warning(
            "dropped a WebSocket of client %r on gateway %r: too slow for its broadcasts "
            "(send queue full), closing with %d",
            conn.client_id, conn.gateway_id, CLOSE_TOO_SLOW,
        )
        if conn.task is not None:
            conn.task.cancel()
        while not conn.outbox.empty():
            conn.outbox.get_nowait()
        conn.queued = 0
        task = asyncio.ensure_future(conn.close(CLOSE_TOO_SLOW, "too slow: resync by pull"))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
