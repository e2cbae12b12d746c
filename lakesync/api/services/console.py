"""The web console's server side: admin sign-in sessions (an HttpOnly cookie, so the token never
sits in a URL or in the page's storage; a session lasts while its token verifies), the sampler
that keeps the last hour in memory (:class:`lakesync.console.History`) and the latest snapshot
the live stream sends."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio.to_thread
import msgspec

from lakesync.api.auth import own_admin_claims
from lakesync.api.services.status import COUNT_LIMIT, StatusService
from lakesync.api.services.sync import SyncService
from lakesync.console import Counts, History, Point
from lakesync.errors import AuthError, LakeSyncError
from lakesync.hotlog.ports import AdminStore
from lakesync.status import StatusResponse

__all__ = ["SESSION_COOKIE", "SESSION_TTL_S", "ConsoleService", "Snapshot"]

_log = logging.getLogger(__name__)

SESSION_COOKIE = "lakesync_console"
"""The console's session cookie: a random id, HttpOnly, SameSite=Strict, path ``/console``."""
SESSION_TTL_S = 8 * 3600.0
"""How long a console sign-in lasts at most: less if its token expires sooner."""
_MAX_SESSIONS = 1000
_COUNTED = ("pushes", "pulls", "deltas")
_DRAIN_CHECK_S = 1.0
"""How often a live stream waiting for a sample checks whether the gateway is draining."""


class _Session(msgspec.Struct, frozen=True):
    """A console sign-in: the admin token it was made with and when it ends at the latest."""

    token: str
    ends: float


class Snapshot(msgspec.Struct, frozen=True):
    """What the console's live stream sends after each sample: the status of every gateway and
    each gateway's newest sample."""

    status: StatusResponse
    latest: dict[str, Point]


class TableInfo(msgspec.Struct, frozen=True):
    """A table of a gateway: its declared columns and its rows in the hot log (``capped``: at
    least that many)."""

    table: str
    columns: list[dict[str, Any]]
    rows: int
    rows_capped: bool


class GatewayDetail(msgspec.Struct, frozen=True):
    """The console's page of a gateway beyond its status: tables and the rules in force."""

    gateway: str
    tables: list[TableInfo]
    rules: dict[str, Any] | None


class ConsoleService:
    """Sessions, the sampled history and the live snapshot of the console."""

    def __init__(
        self,
        service: SyncService,
        store: AdminStore,
        status: StatusService,
        every_s: float = 5.0,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._service = service
        self._store = store
        self._status = status
        self._now = now
        self.history = History(every_s=every_s)
        self._sessions: dict[str, _Session] = {}
        self._snapshot: Snapshot | None = None
        self._sampled = asyncio.Condition()
        self._signed_in = asyncio.Event()

    # --- sessions -------------------------------------------------------------------------

    def sign_in(self, token: str) -> str:
        """A new session id for a valid ``admin`` token (of any gateway: admin tokens are the
        operator's), checked as the admin routes check it; :class:`AuthError`,
        :class:`ForbiddenError` or :class:`ValidationError` (a malformed gateway id)
        otherwise."""
        own_admin_claims(token, self._service.settings.jwt_secrets)
        self._sessions = {s: v for s, v in self._sessions.items() if self._live(s)}
        while len(self._sessions) >= _MAX_SESSIONS:  # the oldest sign-ins go first
            self._sessions.pop(min(self._sessions, key=lambda s: self._sessions[s].ends))
        session = secrets.token_urlsafe(32)
        self._sessions[session] = _Session(token, self._now() + SESSION_TTL_S)
        self._signed_in.set()
        return session

    def sign_out(self, session: str | None) -> None:
        """End a session (unknown ids are ignored)."""
        if session is not None:
            self._sessions.pop(session, None)

    def check(self, session: str | None) -> None:
        """:class:`AuthError` unless ``session`` is a live session id whose token still
        verifies: a session ends with its token (expired, or signed with a secret the gateway
        no longer has), not only after :data:`SESSION_TTL_S`."""
        if not self._live(session):
            self._sessions.pop(session or "", None)
            raise AuthError("sign in to the console first")

    def _live(self, session: str | None) -> bool:
        """Whether ``session`` is a session id that has not ended and whose token verifies now
        (a verified token is remembered: this costs a lookup until the token expires)."""
        found = self._sessions.get(session or "")
        if found is None or found.ends <= self._now():
            return False
        try:
            own_admin_claims(found.token, self._service.settings.jwt_secrets)
        except LakeSyncError:
            return False
        return True

    # --- sampling -------------------------------------------------------------------------

    async def sample(self) -> Snapshot:
        """Take one sample of every known gateway, keep it and wake the live streams."""
        service = self._service
        status = await self._status.status(await self._status.known_gateways())
        at = self._now()
        counts = {
            g.gateway: Counts(*(service.metrics.count_of(g.gateway, w) for w in _COUNTED))
            for g in status.gateways
        }
        latest = {g.gateway: self.history.add(at, counts[g.gateway], g) for g in status.gateways}
        snapshot = Snapshot(status, latest)
        async with self._sampled:
            self._snapshot = snapshot
            self._sampled.notify_all()
        return snapshot

    def _watched(self) -> bool:
        """Whether a console session is live (the ended ones are forgotten): only then is a
        sample worth its cost."""
        self._sessions = {s: v for s, v in self._sessions.items() if self._live(s)}
        return bool(self._sessions)

    async def run(self) -> None:
        """Sample every :attr:`History.every_s` seconds until cancelled (a failed sample is
        logged and the next one tried), while someone is signed in to the console.

        A sample builds the whole status, which asks every declared destination for its
        watermarks (a query job on BigQuery): a gateway nobody watches does not pay that every
        few seconds. The history starts with the first sign-in after the gateway started."""
        while True:
            if not self._watched():
                self._signed_in.clear()
                await self._signed_in.wait()
            try:
                await self.sample()
            except Exception:
                _log.exception("console: a status sample failed")
            await asyncio.sleep(self.history.every_s)

    async def snapshots(self, session: str | None) -> AsyncIterator[Snapshot]:
        """The latest snapshot now (if any), then each new one as it is taken, for the live
        ``session``; ends when the session does or when the gateway starts draining (an open
        stream would otherwise hold up its shutdown)."""
        seen: Snapshot | None = None
        while not self._service.draining and self._live(session):
            async with self._sampled:
                if self._snapshot is seen:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._sampled.wait(), _DRAIN_CHECK_S)
                current = self._snapshot
            if current is not None and current is not seen:
                seen = current
                yield current

    # --- a gateway's page -----------------------------------------------------------------

    async def gateway_detail(self, gw: str) -> GatewayDetail:
        """The tables (declared columns, rows in the hot log) and rules of gateway ``gw``."""
        return await anyio.to_thread.run_sync(self._detail, gw)

    def _detail(self, gw: str) -> GatewayDetail:
        store = self._store
        tables = []
        for name, schema in sorted(store.list_docs(gw, "schema").items()):
            rows = store.row_ids(gw, name, None, COUNT_LIMIT)
            columns = list(schema.get("columns", []))
            tables.append(TableInfo(name, columns, len(rows), len(rows) >= COUNT_LIMIT))
        record = store.get_rules(gw)
        rules = None if record.rules is None else msgspec.to_builtins(record.rules)
        return GatewayDetail(gw, tables, rules)
