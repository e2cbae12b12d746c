"""WebSocket transport (SPEC §9): binary protobuf frames, realtime broadcasts, reconnects.

One connection per client. Requests (push, pull) are serialised: a request sends its frame and
waits for the next untagged reply. A reader thread owns the socket's receive side: replies go
to the waiting request, ``0x03`` broadcasts go straight to the broadcast handler. When the
connection drops while realtime delivery is wanted, the reader reconnects with backoff and then
calls the reconnect handler so the client pulls what it missed (broadcasts never move the
cursor, so nothing is lost and the pull re-delivers idempotently).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from inspect import signature
from typing import Any

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from client._auth import TokenProvider
from client._backoff import Backoff
from client.errors import (
    AuthError,
    BackpressureError,
    ConnectionFailedError,
    ForbiddenError,
    LakeSyncError,
    RateLimitedError,
    ValidationError,
)
from client.transport._base import (
    BroadcastHandler,
    Checkpoint,
    EventHandler,
    PullPage,
    PushResult,
    Transport,
    gateway_error,
)
from client.transport.http import HttpTransport
from lakesync.delta import RowDelta
from lakesync.errors import code_for_status, error_for_code
from lakesync.wsframes import ServerFrame, decode_server_frame, encode_pull, encode_push

__all__ = ["WebSocketTransport"]

_log = logging.getLogger(__name__)
_Reply = ServerFrame | LakeSyncError
# websockets 17 deprecates using connect()'s result directly unless asked for with legacy=True
# (its future connect() becomes an auto-reconnecting iterator); older versions lack the flag.
_DIRECT: dict[str, Any] = {"legacy": True} if "legacy" in signature(connect).parameters else {}


class WebSocketTransport(Transport):
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
        self._http = HttpTransport(url, gateway_id, tokens, timeout)
        self._ws: ClientConnection | None = None
        self._replies: queue.Queue[_Reply] = queue.Queue()
        self._request_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._closed = False
        self._drops = 0
        self._refresh_lock = threading.Lock()
        self._on_broadcast: BroadcastHandler | None = None
        self._on_reconnect: Callable[[], None] | None = None

    # -- Transport ------------------------------------------------------------------------

    def set_broadcast_handler(self, handler: BroadcastHandler | None) -> None:
        """Apply broadcasts with ``handler`` (called on the reader thread)."""
        self._on_broadcast = handler

    def set_reconnect_handler(self, handler: Callable[[], None] | None) -> None:
        """Call ``handler`` (on the reader thread) after a dropped connection is re-opened."""
        self._on_reconnect = handler

    def set_event_handler(self, handler: EventHandler | None) -> None:
        """Report value errors of replies, broadcasts (reader thread) and checkpoints."""
        super().set_event_handler(handler)
        self._http.set_event_handler(handler)

    @property
    def connected(self) -> bool:
        """Whether the socket is open."""
        return self._ws is not None

    def push(self, client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int) -> PushResult:
        """Send a ``0x01`` SyncPush and wait for its reply."""
        reply = self._request(encode_push(client_id, deltas, last_seen_hlc))
        return PushResult(reply.server_hlc, len(deltas))

    def pull(self, client_id: str, since: int, limit: int) -> PullPage:
        """Send a ``0x02`` SyncPull and wait for its reply."""
        reply = self._request(encode_pull(client_id, since, limit))
        return PullPage(reply.deltas, reply.server_hlc, reply.has_more)

    def checkpoint(self) -> Checkpoint | None:
        """The checkpoint route is HTTP only."""
        return self._http.checkpoint()

    def connect(self) -> None:
        """Open the socket now (it is otherwise opened by the first request)."""
        self._ensure()

    def close(self) -> None:
        """Close the socket and stop reconnecting."""
        self._closed = True
        with self._state_lock:
            ws, self._ws = self._ws, None
        if ws is not None:
            ws.close()
        self._http.close()

    # -- internals ------------------------------------------------------------------------

    def _open(self) -> ClientConnection:
        for attempt in range(2):
            headers = {"Authorization": f"Bearer {self._tokens.token}"}
            try:
                ws: ClientConnection = connect(
                    self._url,
                    additional_headers=headers,
                    open_timeout=self._timeout,
                    max_size=None,
                    compression=None,
                    **_DIRECT,
                )
                return ws
            except InvalidStatus as exc:
                status = exc.response.status_code
                if status == 401 and attempt == 0 and self._tokens.refreshable:
                    self._tokens.refresh()
                    continue
                raise gateway_error(status, bytes(exc.response.body or b"")) from None
            except (OSError, TimeoutError, InvalidHandshake, ConnectionClosed) as exc:
                raise ConnectionFailedError(f"cannot open WebSocket {self._url}: {exc}") from exc
        raise AuthError("the gateway refused the refreshed token")

    def _ensure(self) -> ClientConnection:
        with self._state_lock:
            if self._closed:
                raise ConnectionFailedError("the transport is closed")
            if self._ws is None:
                ws = self._open()
                self._ws = ws
                threading.Thread(
                    target=self._read_loop, args=(ws,), name="lakesync-ws-reader", daemon=True
                ).start()
            return self._ws

    def _refresh_if_stale(self, used: str) -> bool:
        """Ask for a new token unless someone already replaced ``used``; False if impossible."""
        if not self._tokens.refreshable:
            return False
        with self._refresh_lock:
            if self._tokens.token == used:
                self._tokens.refresh()
        return True

    def _request(self, frame: bytes) -> ServerFrame:
        for attempt in range(2):
            used = self._tokens.token
            try:
                return self._request_once(frame)
            except AuthError:
                # The gateway accepts the socket, then closes it with 4401 for a bad token.
                if attempt == 1 or not self._refresh_if_stale(used):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _request_once(self, frame: bytes) -> ServerFrame:
        with self._request_lock:
            ws = self._ensure()
            while not self._replies.empty():  # leftovers of an earlier connection or request
                self._replies.get_nowait()
            try:
                ws.send(frame)
            except ConnectionClosed as exc:
                raise _close_error(ws) from exc
            try:
                reply = self._replies.get(timeout=self._timeout)
            except queue.Empty:
                ws.close()
                raise ConnectionFailedError(
                    f"no reply from the gateway within {self._timeout} s"
                ) from None
            if isinstance(reply, LakeSyncError):
                raise reply
            return reply

    def _read_loop(self, ws: ClientConnection) -> None:
        used = self._tokens.token
        try:
            for message in ws:
                self._drops = 0
                if isinstance(message, str):
                    self._replies.put(ConnectionFailedError("unexpected text frame"))
                    continue
                try:
                    frame = decode_server_frame(message, self._cell_errors)
                except ValidationError as exc:
                    self._replies.put(exc)
                    continue
                if not frame.broadcast:
                    self._replies.put(frame)
                elif self._on_broadcast is not None:
                    try:
                        self._on_broadcast(frame.deltas)
                    except Exception:
                        # The cursor did not move, so the next pull brings these deltas again.
                        _log.exception("applying a WebSocket broadcast failed")
        except ConnectionClosed:
            pass
        finally:
            err = _close_error(ws)
            self._replies.put(err)
            with self._state_lock:
                if self._ws is ws:
                    self._ws = None
        if isinstance(err, AuthError | ForbiddenError) and (
            isinstance(err, ForbiddenError) or not self._refresh_if_stale(used)
        ):
            return  # reconnecting cannot help; the next request reports the error
        self._reconnect()

    def _reconnect(self) -> None:
        while not self._closed and self._on_broadcast is not None and self._ws is None:
            time.sleep(self._backoff.delay(self._drops))
            self._drops += 1
            try:
                self._ensure()
            except LakeSyncError as exc:
                _log.info("WebSocket reconnect attempt %d failed: %s", self._drops, exc)
                if isinstance(exc, AuthError | ForbiddenError):
                    return
                continue
            if self._on_reconnect is not None:
                try:
                    self._on_reconnect()
                except Exception:
                    _log.exception("catch-up after reconnect failed")
            return


def _close_error(ws: ClientConnection) -> LakeSyncError:
    """The error a request gets when the gateway closes the socket under it.

    The gateway closes with ``4000 + HTTP status`` for SPEC errors (4401 bad token, 4403
    forbidden, 4422 schema, 4429 rate limited, …), 1008 when frames come too fast, 1013 when
    it is full or the receiver is too slow, 1001 when it shuts down.
    """
    code, reason = ws.close_code, ws.close_reason or ""
    if code is not None and 4000 <= code < 5000:
        status = code - 4000
        message = reason or f"the gateway closed the WebSocket with code {code}"
        return error_for_code(code_for_status(status), message, status)
    if code == 1008:
        return RateLimitedError(reason or "WebSocket frame rate limit exceeded")
    if code == 1013:
        return BackpressureError(reason or "the gateway is busy")
    return ConnectionFailedError(f"WebSocket closed (code {code}): {reason}")
