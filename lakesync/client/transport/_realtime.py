"""The WebSocket's decisions without I/O: what a received message is, what a close means, and
whether and when to reconnect.

:class:`AsyncWebSocketTransport` owns the socket and calls these; tests call them with bytes
and close codes.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from itertools import count
from typing import Literal

from lakesync.client._backoff import Backoff
from lakesync.client.errors import (
    AuthError,
    BackpressureError,
    ConnectionFailedError,
    ForbiddenError,
    LakeSyncError,
    RateLimitedError,
    ValidationError,
)
from lakesync.delta import CellErrorHandler, RowDelta
from lakesync.errors import code_for_status, error_for_code
from lakesync.wsframes import CLOSE_TOO_SLOW, ServerFrame, decode_server_frame

__all__ = ["Broadcast", "Reconnects", "close_error", "received"]


@dataclass(frozen=True, slots=True)
class Broadcast:
    """Other clients' deltas the gateway pushed (``0x03``): applied, never a reply."""

    deltas: list[RowDelta]


def received(
    message: str | bytes, cell_errors: CellErrorHandler | None = None
) -> ServerFrame | Broadcast | LakeSyncError:
    """What a received message is: the reply to the waiting request, a broadcast, or the
    error the waiting request gets (a text frame, an undecodable frame)."""
    if isinstance(message, str):
        return ConnectionFailedError("unexpected text frame")
    try:
        frame = decode_server_frame(message, cell_errors)
    except ValidationError as exc:
        return exc
    return Broadcast(frame.deltas) if frame.broadcast else frame


def close_error(code: int | None, reason: str | None) -> LakeSyncError:
    """The error a request gets when the gateway closes the socket under it.

    The gateway closes with ``4000 + HTTP status`` for protocol errors (4401 bad token, 4403
    forbidden, 4422 schema, 4429 rate limited, …), 4408 when this receiver took its broadcasts
    too slowly, 1008 when frames come too fast, 1013 when it is full, 1001 when it shuts down.
    """
    reason = reason or ""
    if code == CLOSE_TOO_SLOW:  # dropped as a slow receiver: reconnect, pull what was missed
        return BackpressureError(reason or "the gateway dropped this slow receiver")
    if code is not None and 4000 <= code < 5000:
        status = code - 4000
        message = reason or f"the gateway closed the WebSocket with code {code}"
        return error_for_code(code_for_status(status), message, status)
    if code == 1008:
        return RateLimitedError(reason or "WebSocket frame rate limit exceeded")
    if code == 1013:
        return BackpressureError(reason or "the gateway is busy")
    return ConnectionFailedError(f"WebSocket closed (code {code}): {reason}")


Decision = Literal["reconnect", "refresh", "stop"]


@dataclass(slots=True)
class Reconnects:
    """When a dropped connection is opened again: after each drop while realtime delivery is
    wanted, waiting the backoff's delay for the drops in a row without traffic (a gateway at
    its cap), which a message received resets."""

    backoff: Backoff
    drops: int = field(default=0)

    def after_close(
        self, err: LakeSyncError, *, wanted: bool, refreshable: bool, token_replaced: bool
    ) -> Decision:
        """Whether to reconnect after the connection closed with ``err``: ``"refresh"`` the
        token first (a bad token nobody replaced yet), or ``"stop"``. ``wanted``: the transport
        is open and has a broadcast handler."""
        if not wanted or isinstance(err, ForbiddenError):
            return "stop"
        if not isinstance(err, AuthError):
            return "reconnect"
        # A bad token cannot be fixed by reconnecting unless a fresh one can be had.
        if not refreshable:
            return "stop"
        return "reconnect" if token_replaced else "refresh"

    def wait(self) -> float:
        """The wait before the next reconnect (counts the drop)."""
        delay = self.backoff.delay(self.drops)
        self.drops += 1
        return delay

    def traffic(self) -> None:
        """A message arrived: the connection works again."""
        self.drops = 0

    def delays(self) -> Generator[float]:
        """Waits between failed attempts to open a connection."""
        for attempt in count(self.drops):
            yield self.backoff.delay(attempt)
