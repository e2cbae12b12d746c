"""Push and pull for every gateway: validation, access, the hot log and broadcasts.

Handlers (HTTP and WebSocket) decode their input, authenticate, and call :class:`SyncService`;
it validates everything before storing anything, appends the batch atomically, and hands new
entries to the :class:`~lakesync.api.services.hub.Hub`. Store calls run in worker threads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import anyio.to_thread

from lakesync import telemetry
from lakesync.api.metrics import GatewayMetrics
from lakesync.api.services.hub import Connection, Hub
from lakesync.api.services.limits import RateLimiter
from lakesync.api.settings import GatewaySettings
from lakesync.connector_specs import tables_by_gateway
from lakesync.delta import RowDelta, is_reserved_client
from lakesync.errors import (
    BackpressureError,
    ForbiddenError,
    RateLimitedError,
    SchemaError,
    StoreUnavailableError,
    ValidationError,
    first_line,
    is_store_outage,
)
from lakesync.hlc import HLC
from lakesync.hotlog.base import (
    AppendResult,
    LogEntry,
    LogNotice,
    Page,
    RowKey,
    RowRecord,
    RulesRecord,
    WriteCheck,
)
from lakesync.hotlog.ports import SyncStore
from lakesync.hotlog.sharded import ShardedHotLog
from lakesync.merge import RowState
from lakesync.rules import (
    RelationRows,
    SyncRules,
    bind_relations,
    check_rules,
    claim_holds,
    claim_values,
    is_bound,
    lookups,
    moved_lookups,
    relation_claims,
    relation_reader,
    subqueries,
    visible,
    write_refusal,
)
from lakesync.schema import TableSchema, check_delta, evolve, parse_schema, schema_to_wire
from lakesync.status import ClientActivity
from lakesync.views import (
    Reader,
    RowHistory,
    SnapshotCache,
    ViewHistory,
    claims_hash,
    effective_rules,
    hidden_changed,
    page_view,
    relation_moves,
    resync_view,
)

__all__ = ["HeldCursors", "PullResult", "PushResult", "SyncService"]

T = TypeVar("T")

_NEVER = 2**63 - 1
"""An ingest stamp past every real one (read to the head of the log)."""

@dataclass(frozen=True, slots=True)
class PushResult:
    """A stored push: the ingest HLC after it, deltas counted as accepted, newly stored ones,
    and the ingest HLC just before its first newly stored delta (the head when none was new)."""

    server_hlc: int
    accepted: int
    stored: list[RowDelta]
    before: int = 0


class HeldCursors:
    """The cursor each client without view evictions holds, as far as this process saw it: the
    ``serverHlc`` of the last pull or push answered to it; at most ``per_gateway`` clients per
    gateway (the least recent go).

    Such a client (LakeSync v1, the TypeScript one) sets its cursor to a push answer's
    ``serverHlc`` and pulls one page per sync. Answering its push with the ingest head would
    skip what it has not pulled yet: the rest of a page it paged into, other clients' deltas
    stored since its pull, and the evictions of rows its own batch gave away. Its push is
    answered with :meth:`push_answer` instead (docs/protocol.md §6)."""

    def __init__(self, per_gateway: int = 10_000) -> None:
        self._per_gateway = per_gateway
        self._held: dict[str, OrderedDict[str, int]] = {}

    def answered(self, gateway: str, client: str, cursor: int) -> None:
        """Note the ``serverHlc`` a pull or a push answered ``client``."""
        held = self._held.setdefault(gateway, OrderedDict())
        held.pop(client, None)
        held[client] = cursor
        while len(held) > self._per_gateway:
            held.popitem(last=False)

    def push_answer(self, gateway: str, client: str, before: int) -> int:
        """The ``serverHlc`` for a push of ``client`` stored after ingest HLC ``before``: never
        past the cursor it was last answered, nor past its own batch (whose evictions and
        snapshots its next pull then brings); noted as its cursor."""
        gateway_held = self._held.get(gateway)
        held = None if gateway_held is None else gateway_held.get(client)
        cursor = before if held is None else min(held, before)
        self.answered(gateway, client, cursor)
        return cursor


@dataclass(frozen=True, slots=True)
class PullResult:
    """A pull page: deltas for the client, the next cursor and whether more is waiting."""

    deltas: list[RowDelta]
    server_hlc: int
    has_more: bool


_log = logging.getLogger(__name__)


async def _run(fn: Callable[..., T], *args: Any) -> T:
    return await anyio.to_thread.run_sync(fn, *args)


def _write_access(claims: Mapping[str, Any], batch: Sequence[RowDelta]) -> WriteCheck:
    """The row-level write access of a client's push (:func:`~lakesync.rules.write_refusal`),
    for the store to judge under its writers' lock against the rules and rows it is about to
    change (admins, and so connectors, may write anything); a refusal names the delta by its
    position in ``batch``."""

    def check(
        rules: SyncRules | None,
        new: Sequence[RowDelta],
        states: Mapping[RowKey, RowState],
        relations: RelationRows,
    ) -> None:
        refused = write_refusal(effective_rules(rules, claims), claims, new, states, relations)
        if refused is not None:
            i, reason = refused
            at = next(j for j, d in enumerate(batch) if d.delta_id == new[i].delta_id)
            raise ForbiddenError(f"deltas[{at}]: {reason}")

    return check


@dataclass
class _Fanout:
    """Where a gateway's in-order broadcasts stand (a store of several stores)."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    at: int | None = None
    origins: dict[str, tuple[int, Connection | None]] = field(default_factory=dict)
    """The sender of each pushed entry not broadcast yet, by deltaId, with its ingest HLC."""


class SyncService:
    """The gateway's behaviour, shared by every gateway (tenant) the app serves."""

    def __init__(
        self,
        store: SyncStore,
        settings: GatewaySettings,
        metrics: GatewayMetrics,
        hub: Hub,
    ) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self.hub = hub
        self.clock: HLC = store.clock
        self.limiter = RateLimiter(settings.rate_limit, settings.rate_burst)
        self.draining = False
        self.clients = ClientActivity()
        """When each client was last seen here, and the backlog it reported (the status)."""
        self.cursors = HeldCursors()
        """The cursors of the clients without view evictions, for their push answers."""
        self._snapshot_caches: dict[str, SnapshotCache] = {}
        self._moving: dict[str, asyncio.Lock] = {}  # per gateway: see _move_views
        # A store of several (sharded) stores broadcasts in one order (see _fan_out).
        self._fanouts: dict[str, _Fanout] | None = (
            {} if isinstance(store, ShardedHotLog) else None
        )

    def snapshots(self, gateway_id: str) -> SnapshotCache:
        """The row-snapshot memo of one gateway."""
        cache = self._snapshot_caches.get(gateway_id)
        if cache is None:
            cache = self._snapshot_caches[gateway_id] = SnapshotCache()
        return cache

    # -- guards ---------------------------------------------------------------------------------
    def check_rate(self, gateway_id: str, client_id: str) -> None:
        """Raise :class:`RateLimitedError` when this client exceeds its request rate."""
        wait = self.limiter.take((gateway_id, client_id))
        if wait > 0:
            raise RateLimitedError("too many requests; slow down", retry_after=wait)

    @staticmethod
    def check_client(claims: Mapping[str, Any], client_id: str | None) -> str:
        """The client id of a request, which must be the token's ``sub``."""
        sub = str(claims["sub"])
        if is_reserved_client(sub):
            raise ForbiddenError(f"client id {sub!r} is reserved for gateways; use another sub")
        if client_id is not None and client_id != sub:
            raise ForbiddenError(f"clientId {client_id!r} does not match the token subject")
        return sub

    # -- push -----------------------------------------------------------------------------------
    async def push(
        self,
        gateway_id: str,
        claims: Mapping[str, Any],
        client_id: str,
        deltas: Sequence[RowDelta],
        origin: Connection | None = None,
        *,
        whole_rows: bool = False,
    ) -> PushResult:
        """Validate and store a batch; broadcast what is new. Nothing is stored on any error.
        For a client without view evictions (``whole_rows``) ``server_hlc`` is the cursor
        :meth:`HeldCursors.push_answer` gives it, not the head."""
        with self.metrics.push_seconds.time():
            sub = self.check_client(claims, client_id)
            self.clients.seen(gateway_id, sub, time.time())
            result = await self._push(gateway_id, claims, sub, deltas, origin)
        if not whole_rows:
            return result
        cursor = self.cursors.push_answer(gateway_id, sub, result.before)
        return PushResult(cursor, result.accepted, result.stored, result.before)

    async def push_from_connector(
        self, gateway_id: str, client_id: str, deltas: Sequence[RowDelta]
    ) -> PushResult:
        """A connector's batch, through the same validation, dedup, backpressure, landing and
        broadcasts as a client's. ``client_id`` must be reserved for gateways (no client can
        push as a connector); sync rules, which say what clients read and write, do not limit
        what the gateway's own connectors bring in."""
        if not is_reserved_client(client_id):
            raise ForbiddenError(f"client id {client_id!r} is not a gateway's")
        with self.metrics.push_seconds.time():
            claims = {"sub": client_id, "role": "admin"}
            return await self._push(gateway_id, claims, client_id, deltas, None)

    async def _push(
        self,
        gateway_id: str,
        claims: Mapping[str, Any],
        sub: str,
        deltas: Sequence[RowDelta],
        origin: Connection | None,
    ) -> PushResult:
        if len(deltas) > self.settings.max_deltas:
            raise ValidationError(
                f"a push carries at most {self.settings.max_deltas} deltas, got {len(deltas)}"
            )
        for i, d in enumerate(deltas):
            if d.client_id != sub:
                raise ForbiddenError(
                    f"deltas[{i}].clientId {d.client_id!r} does not match the token subject"
                )
        if self.draining:
            raise BackpressureError("the gateway is shutting down; retry on another instance")
        if not deltas:
            head = await _run(self.store.head)
            return PushResult(head, 0, [], head)
        with telemetry.span("lakesync.push", {"lakesync.gateway": gateway_id,
                                              "lakesync.deltas": len(deltas)}):
            with telemetry.span("lakesync.hotlog.append"):
                result = await _run(self._check_and_append, gateway_id, claims, deltas)
            if result.stored:
                # The flush that lands this position continues the push's trace.
                telemetry.remember_push(result.stored[-1].ingest_hlc)
        self.metrics.count(gateway_id, "pushes")
        self.metrics.count(gateway_id, "deltas", len(result.stored))
        stored = [e.delta for e in result.stored]
        # Ingest HLCs are integers read as "after": one below the first is before the batch.
        before = result.stored[0].ingest_hlc - 1 if result.stored else result.head
        if not result.stored:
            return PushResult(result.head, result.accepted, stored, before)
        if self._fanouts is not None:
            await self._fan_out(gateway_id, result.stored, origin)
            return PushResult(result.head, result.accepted, stored, before)
        if self.hub.count_for(gateway_id) == 0:
            return PushResult(result.head, result.accepted, stored, before)
        # The batch is atomic: the states inside it were never visible, so all its deltas count
        # as of its last ingest stamp.
        end = result.stored[-1].ingest_hlc
        later: dict[RowKey, list[tuple[int, RowDelta]]] = {}
        for e in result.stored:
            later.setdefault((e.delta.table, e.delta.row_id), []).append((end, e.delta))
        history = {key: (before, later.get(key, [])) for key, before in result.before.items()}
        assert result.rules is not None  # an append that stored entries read them
        self.hub.publish(
            gateway_id,
            result.stored,
            result.rows,
            result.rules,
            origin,
            self.snapshots(gateway_id),
            history,
        )
        changed = {k: (result.before.get(k), r.state) for k, r in result.rows.items()}
        await self._move_views(gateway_id, result.rules.rules, changed, end)
        return PushResult(result.head, result.accepted, stored, before)

    def _check_and_append(
        self, gateway_id: str, claims: Mapping[str, Any], deltas: Sequence[RowDelta]
    ) -> AppendResult:
        """Check a batch against the schemas, the clock and the backpressure limit, then append
        it, the append judging its write access under the writers' lock: the store calls of a
        push in one worker-thread call, not one each."""
        schemas = self._schemas(gateway_id)
        for d in deltas:
            schema = schemas.get(d.table)
            if schema is not None:
                check_delta(schema, d)
        # Drift check and clock merge: ingest stamps then exceed every client HLC in the batch.
        self.clock.recv(max(d.hlc for d in deltas))
        limit = self.settings.backpressure_bytes
        if limit > 0 and self.store.unflushed_bytes() > limit:
            raise BackpressureError(
                "the hot log is over its un-flushed size limit; retry after the next flush"
            )
        return self.store.append(gateway_id, list(deltas), _write_access(claims, deltas))

    # -- pull -----------------------------------------------------------------------------------
    async def pull(
        self,
        gateway_id: str,
        claims: Mapping[str, Any],
        since: int,
        limit: int,
        *,
        whole_rows: bool,
    ) -> PullResult:
        """A page of what the client may see after ``since`` (see :mod:`lakesync.views`);
        ``whole_rows`` for a client without view evictions (:attr:`Reader.whole_rows`)."""
        with self.metrics.pull_seconds.time():
            self.clients.seen(gateway_id, str(claims["sub"]), time.time())
            return await self._pull(gateway_id, claims, since, limit, whole_rows)

    async def _pull(
        self,
        gateway_id: str,
        claims: Mapping[str, Any],
        since: int,
        limit: int,
        whole_rows: bool,
    ) -> PullResult:
        rules = await _run(self.store.get_rules, gateway_id)
        raw = rules.stamp == 0
        self.metrics.count(gateway_id, "pulls")
        if raw:
            page = await _run(self.store.read_page, gateway_id, since, limit, False)
            return self._page_result([e.delta for e in page.entries], page, since)
        client_id = str(claims["sub"])
        claims = await _run(self.bind, gateway_id, rules.rules, claims)
        view = await _run(
            self.store.view_stamp, gateway_id, client_id, claims_hash(claims), claims
        )
        stamp = max(rules.stamp, view)
        reader = await self._reader(gateway_id, claims, rules.rules, stamp, since, whole_rows)
        cache = self.snapshots(gateway_id)
        if since < stamp:
            snap = await self._resync_rows(gateway_id, reader, rules.stamp)
            history = await self._history(gateway_id, snap.rows, reader, snap.head)
            deltas = resync_view(snap.rows, reader, cache, history)
            return PullResult(deltas, max(snap.head, stamp, since), False)
        cursor = since
        while True:
            page = await _run(self.store.read_page, gateway_id, cursor, limit, True)
            history = await self._history(gateway_id, page.rows, reader, page.head)
            deltas = page_view(
                [e.delta for e in page.entries], page.rows, reader, False, cache, history
            )
            # A client without view evictions keeps its cursor on an empty page (LakeSync v1
            # does): it would ask for the same page for ever, so it gets the next one.
            if deltas or not page.has_more or not whole_rows:
                return self._page_result(deltas, page, cursor)
            cursor = page.entries[-1].ingest_hlc

    async def _resync_rows(self, gateway_id: str, reader: Reader, rules_stamp: int) -> Page:
        """The rows a resync must look at: for a fresh client under rules with an equality
        filter in every bucket, only the rows the filter-column index finds (its first sync
        costs its view, not the gateway); for a client whose view moved only because its bound
        relations did, the rows that moved and those changed since its cursor; otherwise every
        row."""
        if reader.since > 0 and rules_stamp <= reader.since:
            moved = relation_moves(reader.rules, reader.history)
            if moved is not None:
                found = await _run(self._moved_rows, gateway_id, moved, reader.since)
                if found is not None:
                    return found
        plan = None
        if reader.since == 0 and reader.rules is not None:
            plan = lookups(reader.rules, reader.claims)
        if plan is not None:
            found = await _run(
                self.store.read_matching, gateway_id, plan, sorted(reader.written)
            )
            if found is not None:
                return found
        return await _run(self.store.read_all_rows, gateway_id)

    def _moved_rows(
        self, gateway_id: str, moved: list[tuple[str, list[str]]], since: int
    ) -> Page | None:
        """The rows the log touched after ``since`` and those ``moved`` finds, with the head
        of the log read (None when the index does not follow the rules)."""
        changed = self.store.read_range(gateway_id, since, _NEVER)
        found = self.store.read_matching(gateway_id, moved, list(changed.rows))
        if found is None:
            return None
        return Page([], found.rows, changed.head, False)

    @staticmethod
    def _page_result(deltas: list[RowDelta], page: Page, since: int) -> PullResult:
        if page.has_more:
            return PullResult(deltas, page.entries[-1].ingest_hlc, True)
        return PullResult(deltas, max(page.head, since), False)

    async def _reader(
        self,
        gateway_id: str,
        claims: Mapping[str, Any],
        rules: SyncRules | None,
        stamp: int,
        since: int,
        whole_rows: bool,
    ) -> Reader:
        """A client's read, with the history of its view since its cursor."""
        client_id = str(claims["sub"])
        versions, seen = await _run(self.store.view_history, gateway_id, client_id, since)
        history = ViewHistory(versions, seen or [(0, dict(claims))])
        written: frozenset[RowKey] = frozenset()
        if since == 0:
            written = frozenset(await _run(self.store.rows_written_by, gateway_id, client_id))
        applied = effective_rules(rules, claims)
        return Reader(client_id, claims, applied, stamp, since, history, written, whole_rows)

    async def _history(
        self, gateway_id: str, rows: Mapping[RowKey, RowRecord], reader: Reader, upto: int
    ) -> RowHistory:
        """The histories :func:`~lakesync.views.may_hold` needs for a read of ``rows``."""
        keys = hidden_changed(rows, reader)
        if not keys:
            return {}
        return await _run(self.store.row_history, gateway_id, keys, reader.since, upto)

    def bind(
        self, gateway_id: str, rules: SyncRules | None, claims: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        """A client's claims with the subqueries of the rules that apply to it resolved on the
        gateway's merged state (:func:`~lakesync.rules.bind_relations`): what, with the rules,
        decides its view; ``claims`` themselves under rules without subqueries."""
        applied = effective_rules(rules, claims)
        if not subqueries(applied):
            return claims
        rows = partial(self.store.read_relation, gateway_id)
        return bind_relations(applied, claims, relation_reader(rows))

    async def view(
        self, gateway_id: str, claims: Mapping[str, Any]
    ) -> tuple[int, Mapping[str, Any]]:
        """Register a client's view (WebSocket connect): its view stamp and its claims as
        bound (:meth:`bind`)."""
        rules = await _run(self.store.get_rules, gateway_id)
        bound = await _run(self.bind, gateway_id, rules.rules, claims)
        stamp = await _run(
            self.store.view_stamp, gateway_id, str(claims["sub"]), claims_hash(bound), bound
        )
        return stamp, bound

    # -- cross-process broadcasts ---------------------------------------------------------------
    async def relay(self, notice: LogNotice) -> None:
        """Broadcast entries another process stored (PostgreSQL NOTIFY) to local sockets.

        A store outage while it reads them skips the broadcast with one log line: broadcasts
        never move a receiver's cursor, so its next pull brings what it missed. Any other
        failure is logged with its traceback (the task has no one to raise to)."""
        try:
            await self._relay(notice)
        except Exception as exc:
            if is_store_outage(exc) or isinstance(exc, StoreUnavailableError):
                _log.warning(
                    "broadcast of entries %d..%d of %r skipped (receivers pull them): hot-log "
                    "store unavailable: %s", notice.after, notice.upto, notice.gateway_id,
                    first_line(exc),
                )
            else:
                _log.exception("broadcast of entries %d..%d of %r failed", notice.after,
                               notice.upto, notice.gateway_id)

    async def _relay(self, notice: LogNotice) -> None:
        gw = notice.gateway_id
        if self._fanouts is not None:
            await self._fan_out(gw, [], None, notice.after)
            return
        if self.hub.count_for(gw) == 0:
            return
        page = await _run(self.store.read_range, gw, notice.after, notice.upto)
        rules = await _run(self.store.get_rules, gw)
        history = None
        if rules.stamp:
            history = await _run(
                self.store.row_history, gw, list(page.rows), notice.after, page.head
            )
        self.hub.publish(gw, page.entries, page.rows, rules, None, self.snapshots(gw), history)
        if history is not None and page.entries:
            changed = {k: (history[k][0] if k in history else None, r.state)
                       for k, r in page.rows.items()}
            await self._move_views(gw, rules.rules, changed, page.entries[-1].ingest_hlc)

    async def _move_views(
        self,
        gateway_id: str,
        rules: SyncRules | None,
        changed: Mapping[RowKey, tuple[RowState | None, RowState]],
        server_hlc: int,
    ) -> None:
        """Move the views of the gateway's sockets that a change of rows their subqueries read
        may have moved (``changed``: each row's state before and after): rebind each, and when
        its bound claims changed, record them as a new version of its claims and send it the
        snapshots of the rows that entered or left its view, in a broadcast frame at the
        batch's ``server_hlc`` (a pull after it resyncs, as after any claims change)."""
        if rules is None or not subqueries(rules):
            return
        # One move at a time per gateway: each binds on the store as it then is, so two
        # membership changes moving one socket leave it bound as of the later one.
        async with self._moving.setdefault(gateway_id, asyncio.Lock()):
            await self._move_each(gateway_id, rules, changed, server_hlc)

    async def _move_each(
        self,
        gateway_id: str,
        rules: SyncRules,
        changed: Mapping[RowKey, tuple[RowState | None, RowState]],
        server_hlc: int,
    ) -> None:
        conns = self._rebinding(gateway_id, rules, changed)
        for conn in conns:
            if effective_rules(rules, conn.claims) is None:
                continue  # an admin sees everything
            bound = await _run(self.bind, gateway_id, rules, conn.claims)
            if claim_values(rules, bound) == claim_values(rules, conn.claims):
                continue
            stamp = await _run(
                self.store.view_stamp, gateway_id, conn.client_id, claims_hash(bound), bound
            )
            deltas = await _run(self._moved, gateway_id, rules, conn, bound, stamp)
            self.hub.rebind(conn, bound, stamp)
            if deltas:
                self.hub.offer(conn, deltas, server_hlc)

    def _rebinding(
        self,
        gateway_id: str,
        rules: SyncRules,
        changed: Mapping[RowKey, tuple[RowState | None, RowState]],
    ) -> list[Connection]:
        """The sockets whose bound subqueries ``changed`` may touch: those whose claims name
        a changed relation row (:func:`~lakesync.rules.relation_claims`), or all when the
        rules do not narrow it down; and those not bound for these rules yet (connected
        under other rules)."""
        read = {s.table for s in subqueries(rules)}
        unbound = [c for c in self.hub.connections(gateway_id) if not is_bound(rules, c.claims)]
        pairs: set[tuple[str, str]] = set()
        for (table, _), states in changed.items():
            if table not in read:
                continue
            for state in states:
                found = relation_claims(rules, table, None if state is None else state.visible())
                if found is None:
                    return self.hub.connections(gateway_id)
                pairs |= found
        return unbound + [
            c
            for c in self.hub.connections(gateway_id)
            if is_bound(rules, c.claims)
            and any(claim_holds(c.claims, name, value) for name, value in pairs)
        ]

    def _moved(
        self,
        gateway_id: str,
        rules: SyncRules,
        conn: Connection,
        bound: Mapping[str, Any],
        stamp: int,
    ) -> list[RowDelta]:
        """Snapshots of the rows whose visibility to ``conn`` differs between its claims as
        bound before and ``bound``: the rows the index finds for the values that changed
        (:func:`~lakesync.rules.moved_lookups`), every row when it cannot tell."""
        plan = moved_lookups(rules, conn.claims, bound)
        page = None if plan is None else self.store.read_matching(gateway_id, plan, [])
        rows = (page or self.store.read_all_rows(gateway_id)).rows
        cache = self.snapshots(gateway_id)
        out: list[RowDelta] = []
        for key, rec in rows.items():
            values = rec.state.visible()
            shown = visible(rules, bound, key[0], values)
            if shown == visible(rules, conn.claims, key[0], values):
                continue
            base = max(rec.last_ingest, stamp)
            out.extend(cache.snapshot(key, rec, shown, base, conn.whole_rows))
        return out

    async def _fan_out(
        self,
        gw: str,
        stored: Sequence[LogEntry],
        origin: Connection | None,
        after: int | None = None,
    ) -> None:
        """Broadcast, on a store of several stores, everything up to the visible bound not
        broadcast yet, in ingest order: two stores' pushes commit independently, so each push
        or notice (of ``stored``, from ``origin``; or a notice of entries after ``after``)
        reads the gateway's log from where the last broadcast ended up to the bound. A push's
        own entries still skip their sender. With nobody listening the position is forgotten:
        a socket that connects later pulls what it missed, and broadcasts start again from the
        next push."""
        assert self._fanouts is not None
        fan = self._fanouts.setdefault(gw, _Fanout())
        for e in stored:  # before waiting: a fan-out running now may broadcast them
            fan.origins[e.delta.delta_id] = (e.ingest_hlc, origin)
        async with fan.lock:
            if self.hub.count_for(gw) == 0:
                fan.at = None
                fan.origins.clear()
                return
            if fan.at is None:
                fan.at = stored[0].ingest_hlc - 1 if stored else (after or 0)
            # Read up to the visible bound (the page's head): one bound per fan-out.
            page = await _run(self.store.read_range, gw, fan.at, _NEVER)
            bound = page.head
            if bound <= fan.at:
                return
            rules = await _run(self.store.get_rules, gw)
            runs: list[tuple[Connection | None, list[LogEntry]]] = []
            for e in page.entries:
                sender = fan.origins.pop(e.delta.delta_id, (0, None))[1]
                if runs and runs[-1][0] is sender:
                    runs[-1][1].append(e)
                else:
                    runs.append((sender, [e]))
            cache = self.snapshots(gw)
            for sender, entries in runs:
                self.hub.publish(gw, entries, page.rows, rules, sender, cache)
            fan.at = bound
            # A push that registered once its entries were broadcast by another's fan-out.
            for key in [k for k, (at, _) in fan.origins.items() if at <= bound]:
                del fan.origins[key]

    # -- admin ----------------------------------------------------------------------------------
    async def knows(self, gateway_id: str) -> bool:
        """Whether anything is declared (``lakesync.yaml``'s gateways, connectors or
        destinations) or stored (schemas, rules, a checkpoint, deltas) for a gateway: a
        mistyped gateway id is not, and admin listings say so instead of showing nothing."""
        s = self.settings
        declared = [*s.connectors.values(), *s.destinations.values()]
        if gateway_id in s.gateways or any(d.gateway == gateway_id for d in declared):
            return True
        return await _run(self._stored, gateway_id)

    def _stored(self, gateway_id: str) -> bool:
        store = self.store
        return bool(
            store.list_docs(gateway_id, "schema")
            or store.get_rules(gateway_id).stamp
            or store.checkpoint(gateway_id) is not None
            or store.read_page(gateway_id, 0, 1, False).entries
        )

    async def schemas(self, gateway_id: str) -> dict[str, TableSchema]:
        """The registered table schemas of a gateway."""
        return await _run(self._schemas, gateway_id)

    def _schemas(self, gateway_id: str) -> dict[str, TableSchema]:
        docs = self.store.list_docs(gateway_id, "schema")
        return {name: parse_schema(body, stored=True) for name, body in docs.items()}

    async def put_schema(self, gateway_id: str, schema: TableSchema) -> TableSchema:
        """Register or evolve (add nullable columns, widen columns) a table schema, in one atomic
        read-modify-write so concurrent evolutions never drop each other's columns (the later one is
        refused)."""
        rules = (await _run(self.store.get_rules, gateway_id)).rules
        # Only the first schema of a gateway whose rules were set while it had none can leave
        # them naming what no schema has: adding tables or columns to a gateway cannot.
        first = rules is not None and not await self.schemas(gateway_id)

        def change(old: dict[str, Any] | None) -> dict[str, Any]:
            new = schema if old is None else evolve(parse_schema(old, stored=True), schema)
            if not first:
                return schema_to_wire(new)
            try:
                check_rules(rules, {new.table: new}, self._connector_tables(gateway_id))
            except SchemaError as exc:
                raise SchemaError(
                    f"cannot register {new.table!r}: the gateway's sync rules, set while it had "
                    f"no schema, would then be invalid: {exc.message}; set rules naming only "
                    "this table (or none) first, register the schemas, then the full rules"
                ) from None
            return schema_to_wire(new)

        body = await _run(self.store.update_doc, gateway_id, "schema", schema.table, change)
        return parse_schema(body, stored=True)

    async def set_rules(self, gateway_id: str, rules: SyncRules | None) -> RulesRecord:
        """Replace a gateway's sync rules; clients resync on their next pull. Rules naming a
        table or column the gateway's schemas lack are refused (:func:`check_rules`)."""
        check_rules(rules, await self.schemas(gateway_id), self._connector_tables(gateway_id))
        return await _run(self.store.set_rules, gateway_id, rules)

    def _connector_tables(self, gateway_id: str) -> set[str]:
        """The tables the gateway's declared connectors fill (their schemas come as they poll)."""
        return tables_by_gateway(self.settings.connectors).get(gateway_id, set())
