"""WebSocket transport (docs/protocol.md §9): binary protobuf frames, realtime broadcasts,
reconnects.

One connection per client, held by websockets' own reconnecting client (``async for ws in
connect(...)``) in a task on the loop that uses the transport. Requests (push, pull) are
serialised: a request sends its frame and waits for the next untagged reply. The task owns the
socket's receive side: replies go to the waiting request, ``0x03`` broadcasts go straight to the
broadcast handler. When the connection drops while realtime delivery is wanted, websockets
reconnects (failed attempts wait :class:`Backoff` delays) and the reconnect handler then pulls
what was missed, in a task of its own (broadcasts never move the cursor, so nothing is lost and
the pull re-delivers idempotently).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from lakesync.client._auth import TokenProvider
from lakesync.client._backoff import Backoff
from lakesync.client.errors import (
    AuthError,
    ConnectionFailedError,
    ForbiddenError,
    LakeSyncError,
)
from lakesync.client.transport._base import (
    AsyncCheckpoint,
    AsyncTransport,
    BroadcastHandler,
    EventHandler,
    PullPage,
    PushResult,
    ReconnectHandler,
    gateway_error,
)
from lakesync.client.transport._bridge import BlockingTransport
from lakesync.client.transport._realtime import Broadcast, Reconnects, close_error, received
from lakesync.client.transport.http import AsyncHttpTransport
from lakesync.delta import RowDelta
from lakesync.wire import FEATURES_HEADER, VIEW_EVICTIONS_FEATURE
from lakesync.wsframes import (
    ServerFrame,
    encode_pull,
    encode_push,
)

__all__ = ["AsyncWebSocketTransport", "WebSocketTransport"]

_log = logging.getLogger(__name__)
_Reply = ServerFrame | LakeSyncError


class AsyncWebSocketTransport(AsyncTransport):
    """Push and pull over ``ws(s)://…/v1/sync/{gw}/ws``; checkpoints still come over HTTP."""

    realtime = True

    def __init__(
        self,
        url: str,
        gateway_id: str,
        tokens: TokenProvider,
        timeout: float = 30.0,
        backoff: Backoff | None = None,
    ) -> None:
        base = url.rstrip("/")
        scheme, _, rest = base.partition("://")
        ws_scheme = {"http": "ws", "https": "wss"}.get(scheme, scheme)
        self._url = f"{ws_scheme}://{rest}/v1/sync/{gateway_id}/ws"
        self._tokens = tokens
        self._timeout = timeout
        self._backoff = backoff or Backoff()
        self._http = AsyncHttpTransport(url, gateway_id, tokens, timeout)
        self._ws: ClientConnection | None = None
        self._replies: asyncio.Queue[_Reply] = asyncio.Queue()
        self._request_lock = asyncio.Lock()
        self._closed = False
        self._reconnects = Reconnects(self._backoff)
        self._on_broadcast: BroadcastHandler | None = None
        self._on_reconnect: ReconnectHandler | None = None
        self._session: asyncio.Task[None] | None = None
        self._waiters: list[asyncio.Future[ClientConnection]] = []
        self._failure: LakeSyncError | None = None
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    # -- AsyncTransport -------------------------------------------------------------------

    def set_broadcast_handler(self, handler: BroadcastHandler | None) -> None:
        """Apply broadcasts with ``handler`` (called on the loop, as frames arrive)."""
        self._on_broadcast = handler

    def set_reconnect_handler(self, handler: ReconnectHandler | None) -> None:
        """Run ``handler`` (a task of its own) after a dropped connection is re-opened."""
        self._on_reconnect = handler

    def set_event_handler(self, handler: EventHandler | None) -> None:
        """Report value errors of replies, broadcasts and checkpoints."""
        super().set_event_handler(handler)
        self._http.set_event_handler(handler)

    @property
    def connected(self) -> bool:
        """Whether the socket is open."""
        return self._ws is not None

    async def push(
        self, client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int
    ) -> PushResult:
        """Send a ``0x01`` SyncPush and wait for its reply."""
        reply = await self._request(encode_push(client_id, deltas, last_seen_hlc))
        return PushResult(reply.server_hlc, len(deltas))

    async def pull(self, client_id: str, since: int, limit: int) -> PullPage:
        """Send a ``0x02`` SyncPull and wait for its reply."""
        reply = await self._request(encode_pull(client_id, since, limit))
        return PullPage(reply.deltas, reply.server_hlc, reply.has_more)

    async def checkpoint(self) -> AsyncCheckpoint | None:
        """The checkpoint route is HTTP only."""
        return await self._http.checkpoint()

    async def schemas(self) -> list[dict[str, Any]] | None:
        """The schemas route is HTTP only."""
        return await self._http.schemas()

    async def actions(self, client_id: str, actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The action route is HTTP only."""
        return await self._http.actions(client_id, actions)

    async def connect(self) -> None:
        """Open the socket now (it is otherwise opened by the first request)."""
        await self._ensure()

    async def aclose(self) -> None:
        """Close the socket, stop reconnecting and wait for the connection's task (idempotent)."""
        self._closed = True
        session, self._session = self._session, None
        ws = self._ws
        if ws is not None:
            await ws.close()
        if session is not None and not session.done():
            # A session connecting or waiting to reconnect; one whose socket closed ends.
            if ws is None:
                session.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(session), self._timeout)
        for task in list(self._tasks):
            task.cancel()
        self._ws = None
        await self._http.aclose()

    # -- internals ------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a task this transport keeps until it ends (or the transport closes)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _ensure(self) -> ClientConnection:
        """The open connection, else the outcome of the next attempt to open one: a new
        session's first, or a reconnecting session's (woken from its wait after a drop). A
        session between failed attempts fails the request at once, as an unreachable gateway."""
        if self._closed:
            raise ConnectionFailedError("the transport is closed")
        if self._ws is not None:
            return self._ws
        loop = asyncio.get_running_loop()
        if self._session is not None and not self._session.done():
            if self._failure is not None:
                raise ConnectionFailedError(f"the WebSocket is reconnecting: {self._failure}")
            self._wake.set()
        else:
            self._session = loop.create_task(self._hold())
        waiter: asyncio.Future[ClientConnection] = loop.create_future()
        self._waiters.append(waiter)
        return await waiter

    def _settle(self, outcome: ClientConnection | LakeSyncError) -> None:
        """Give the requests waiting for a connection the attempt's outcome."""
        waiters, self._waiters = self._waiters, []
        if isinstance(outcome, ClientConnection):
            self._ws, self._failure = outcome, None
        else:
            self._failure = outcome
        for waiter in waiters:
            if waiter.done():
                continue
            if isinstance(outcome, ClientConnection):
                waiter.set_result(outcome)
            else:
                waiter.set_exception(outcome)

    async def _hold(self) -> None:
        """Hold the connection: open it, serve it, and while realtime delivery is wanted
        reopen it after a drop (websockets' reconnecting iterator; a reopened connection calls
        the reconnect handler). Every attempt's outcome goes to the waiting requests."""
        refreshed = established = False

        def retry_or_raise(exc: Exception) -> Exception | None:
            # websockets asks this for every failed attempt: None retries after a backoff delay.
            nonlocal refreshed
            err = _open_error(exc, self._url)
            if err is None:
                return exc  # not a connection failure: a bug, raised as it is
            if isinstance(err, AuthError) and not refreshed and self._tokens.refreshable:
                refreshed = True
                self._tokens.refresh()
                return None
            self._settle(err)
            if not established or self._closed or isinstance(err, AuthError | ForbiddenError):
                return err
            _log.info("WebSocket reconnect attempt failed: %s", err)
            return None

        try:
            async for ws in connect(
                self._url,
                additional_headers=_HandshakeHeaders(self._tokens),
                open_timeout=self._timeout,
                max_size=None,
                compression=None,
                process_exception=retry_or_raise,
                reconnect_delays=self._reconnects.delays,
            ):
                refreshed = False
                used = self._tokens.token
                self._settle(ws)
                if established and self._on_reconnect is not None:
                    self._spawn(self._catch_up(self._on_reconnect))
                established = True
                err = await self._serve(ws)
                if not (self._keeps_open(err, used) or (self._waiters and not self._closed)):
                    return
                # Drops in a row without traffic (a gateway at its cap) wait longer each
                # time; a request wakes the wait to reconnect at once.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self._reconnects.wait())
                self._wake.clear()
        except LakeSyncError as exc:
            _log.info("WebSocket connection given up: %s", exc)
        finally:
            self._settle(ConnectionFailedError("the WebSocket connection was given up"))

    def _keeps_open(self, err: LakeSyncError, used: str) -> bool:
        """Whether to reconnect after the connection closed with ``err`` (see
        :meth:`Reconnects.after_close`)."""
        decision = self._reconnects.after_close(
            err,
            wanted=not self._closed and self._on_broadcast is not None,
            refreshable=self._tokens.refreshable,
            token_replaced=self._tokens.token != used,
        )
        if decision == "refresh":
            self._tokens.refresh()
        return decision != "stop"

    @staticmethod
    async def _catch_up(handler: ReconnectHandler) -> None:
        """Run the reconnect handler; its pulls queue behind requests like any other."""
        try:
            await handler()
        except Exception:
            _log.exception("catch-up after reconnect failed")

    async def _serve(self, ws: ClientConnection) -> LakeSyncError:
        """Route the connection's frames until it closes; the close as an error."""
        try:
            async for message in ws:
                self._reconnects.traffic()
                self._deliver(message)
        except ConnectionClosed:
            pass
        err = close_error(ws.close_code, ws.close_reason)
        self._replies.put_nowait(err)
        if self._ws is ws:
            self._ws = None
        return err

    def _deliver(self, message: str | bytes) -> None:
        what = received(message, self._cell_errors)
        if not isinstance(what, Broadcast):
            self._replies.put_nowait(what)
        elif self._on_broadcast is not None:
            try:
                self._on_broadcast(what.deltas)
            except Exception:
                # The cursor did not move, so the next pull brings these deltas again.
                _log.exception("applying a WebSocket broadcast failed")

    def _refresh_if_stale(self, used: str) -> bool:
        """Ask for a new token unless someone already replaced ``used``; False if impossible."""
        if not self._tokens.refreshable:
            return False
        if self._tokens.token == used:
            self._tokens.refresh()
        return True

    async def _request(self, frame: bytes) -> ServerFrame:
        for attempt in range(2):
            used = self._tokens.token
            try:
                return await self._request_once(frame)
            except AuthError:
                # The gateway accepts the socket, then closes it with 4401 for a bad token.
                if attempt == 1 or not self._refresh_if_stale(used):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _request_once(self, frame: bytes) -> ServerFrame:
        async with self._request_lock:
            ws = await self._ensure()
            while not self._replies.empty():  # leftovers of an earlier connection or request
                self._replies.get_nowait()
            try:
                await asyncio.wait_for(ws.send(frame), self._timeout)
            except ConnectionClosed as exc:
                raise close_error(ws.close_code, ws.close_reason) from exc
            except TimeoutError:
                self._spawn(ws.close())
                raise ConnectionFailedError(
                    f"the gateway took no frame within {self._timeout} s"
                ) from None
            try:
                reply = await asyncio.wait_for(self._replies.get(), self._timeout)
            except TimeoutError:
                self._spawn(ws.close())
                raise ConnectionFailedError(
                    f"no reply from the gateway within {self._timeout} s"
                ) from None
            if isinstance(reply, LakeSyncError):
                raise reply
            return reply


class WebSocketTransport(BlockingTransport[AsyncWebSocketTransport]):
    """:class:`AsyncWebSocketTransport` with blocking calls (same arguments; broadcasts are
    applied on its loop thread); a client given one drives its core on the client's own loop."""

    implementation = AsyncWebSocketTransport


class _HandshakeHeaders(Mapping[str, str]):
    """The handshake's headers: ``Authorization``, read afresh for every connection attempt,
    and the protocol extensions this client understands (it forgets a row on a view
    eviction, :mod:`lakesync.views`)."""

    def __init__(self, tokens: TokenProvider) -> None:
        self._tokens = tokens

    def __getitem__(self, key: str) -> str:
        if key == "Authorization":
            return f"Bearer {self._tokens.token}"
        if key == FEATURES_HEADER:
            return VIEW_EVICTIONS_FEATURE
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(("Authorization", FEATURES_HEADER))

    def __len__(self) -> int:
        return 2


def _open_error(exc: Exception, url: str) -> LakeSyncError | None:
    """The error of a failed connection attempt (the gateway's refusal, or unreachable); None
    for an exception that is no connection failure."""
    if isinstance(exc, InvalidStatus):
        return gateway_error(exc.response.status_code, bytes(exc.response.body or b""))
    if isinstance(exc, OSError | TimeoutError | InvalidHandshake | ConnectionClosed | EOFError):
        return ConnectionFailedError(f"cannot open WebSocket {url}: {exc}")
    return None
