"""The one interface every transport implements, and the values it exchanges."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from lakesync.client._types import Event
from lakesync.delta import CellError, CellErrorHandler, RowDelta
from lakesync.errors import (
    ConfigError,
    LakeSyncError,
    RateLimitedError,
    code_for_status,
    error_for_code,
)

__all__ = [
    "AsyncCheckpoint",
    "AsyncTransport",
    "BroadcastHandler",
    "Checkpoint",
    "EventHandler",
    "PullPage",
    "PushResult",
    "Received",
    "ReconnectHandler",
    "Transport",
    "gateway_error",
]

BroadcastHandler = Callable[[list[RowDelta]], None]
EventHandler = Callable[[Event], None]
"""Receives the events reading served deltas reports (a value the replica cannot hold)."""
ReconnectHandler = Callable[[], Awaitable[None]]
"""Catches up (pulls) after a dropped realtime connection is back; runs as a task of its own."""


@dataclass(frozen=True, slots=True)
class PullPage:
    """One pull reply: deltas after the cursor, the new cursor, and whether more pages follow."""

    deltas: list[RowDelta]
    server_hlc: int
    has_more: bool


@dataclass(frozen=True, slots=True)
class PushResult:
    """The gateway's acknowledgement of a push batch."""

    server_hlc: int
    accepted: int


@dataclass(slots=True)
class Received:
    """Bytes of a download received so far: the transport counts, the sync engine reports."""

    bytes: int = 0


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """An initial-sync snapshot: pages of deltas and the server HLC to pull from afterwards;
    ``received`` counts its bytes as the pages download."""

    server_hlc: int
    pages: Iterator[list[RowDelta]]
    received: Received = field(default_factory=Received)


@dataclass(frozen=True, slots=True)
class AsyncCheckpoint:
    """:class:`Checkpoint` of an :class:`AsyncTransport`: its pages arrive asynchronously."""

    server_hlc: int
    pages: AsyncGenerator[list[RowDelta], None]
    received: Received = field(default_factory=Received)


class _Reporting:
    """Where a transport reports the values served deltas carry that the replica cannot hold."""

    _on_event: EventHandler | None = None
    #: What the client reports of its backlog: (pending outbox, dead letters).
    _backlog: Callable[[], tuple[int, int]] | None = None
    #: Where reading served deltas reports each value the replica cannot hold.
    _cell_errors: CellErrorHandler | None = None

    def set_backlog_source(self, source: Callable[[], tuple[int, int]] | None) -> None:
        """Report ``source()``, the client's pending outbox and dead letters, to the gateway
        with each push and pull where the transport can (HTTP headers
        ``X-LakeSync-Outbox`` / ``X-LakeSync-Dead-Letters``; ``lakesync status`` shows them)."""
        self._backlog = source

    def set_event_handler(self, handler: EventHandler | None) -> None:
        """Receive events about served deltas that do not stop syncing: a ``value_error`` for
        each value the replica cannot hold (that cell reads null: see
        :func:`lakesync.delta.read_delta`)."""
        self._on_event = handler
        self._cell_errors = None if handler is None else _value_errors(handler)


class AsyncTransport(_Reporting, ABC):
    """The asyncio transport core: moves deltas between a client and one gateway.

    Both clients run on it (:class:`AsyncLakeSyncClient` on the caller's loop,
    :class:`LakeSyncClient` on a loop thread it owns). An instance belongs to the event loop
    that first uses it. Errors are those :class:`Transport` documents.
    """

    #: Whether the gateway pushes other clients' deltas to this transport as they happen.
    realtime: bool = False

    @abstractmethod
    async def push(
        self, client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int
    ) -> PushResult:
        """Send one atomic batch; returns once the gateway stored every delta of it."""

    @abstractmethod
    async def pull(self, client_id: str, since: int, limit: int) -> PullPage:
        """Fetch the deltas ingested after server HLC ``since`` (at most ``limit``)."""

    @abstractmethod
    async def checkpoint(self) -> AsyncCheckpoint | None:
        """Open the gateway's initial-sync checkpoint, or None when it has none (404)."""

    async def actions(self, client_id: str, actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """POST actions (docs/protocol.md §5 ``/action``); their results in order. Transports
        that cannot reach that route raise :class:`ConfigError`."""
        raise ConfigError(f"{type(self).__name__} cannot run actions")

    async def schemas(self) -> list[dict[str, Any]] | None:
        """The gateway's registered table schemas (``GET /schemas``, docs/protocol.md §10), or
        None when this transport or the gateway cannot tell them."""
        return None

    async def connect(self) -> None:
        """Open a realtime connection now (a no-op for transports without one)."""

    def set_broadcast_handler(self, handler: BroadcastHandler | None) -> None:
        """Receive realtime broadcasts, called on the loop (a no-op without them)."""

    def set_reconnect_handler(self, handler: ReconnectHandler | None) -> None:
        """Be told when a dropped realtime connection is back (to catch up by pulling)."""

    @property
    def connected(self) -> bool:
        """Whether the last exchange with the gateway succeeded."""
        return True

    @abstractmethod
    async def aclose(self) -> None:
        """Release connections and tasks (idempotent)."""


class Transport(_Reporting, ABC):
    """Moves deltas between a client and one gateway, with blocking calls.

    :class:`HttpTransport` and :class:`WebSocketTransport` run an :class:`AsyncTransport` on a
    loop thread of their own; a client given one of them drives its core on the client's
    loop instead. Implementations raise :mod:`lakesync.errors` types for gateway errors (rebuilt
    from the protocol error body), :class:`lakesync.client.errors.ConnectionFailedError` when the
    gateway cannot be reached, and refresh the token once on a 401 before giving up with
    ``AuthError``.
    """

    #: Whether the gateway pushes other clients' deltas to this transport as they happen.
    realtime: bool = False

    @abstractmethod
    def push(self, client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int) -> PushResult:
        """Send one atomic batch; returns once the gateway stored every delta of it."""

    @abstractmethod
    def pull(self, client_id: str, since: int, limit: int) -> PullPage:
        """Fetch the deltas ingested after server HLC ``since`` (at most ``limit``)."""

    @abstractmethod
    def checkpoint(self) -> Checkpoint | None:
        """Open the gateway's initial-sync checkpoint, or None when it has none (404)."""

    def actions(self, client_id: str, actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """POST actions (docs/protocol.md §5 ``/action``); their results in order. Transports that
        cannot reach that route raise :class:`ConfigError`."""
        raise ConfigError(f"{type(self).__name__} cannot run actions")

    def schemas(self) -> list[dict[str, Any]] | None:
        """The gateway's registered table schemas (``GET /schemas``, docs/protocol.md §10), or
        None when this transport or the gateway cannot tell them."""
        return None

    def connect(self) -> None:
        """Open a realtime connection now (a no-op for transports without one)."""

    def set_broadcast_handler(self, handler: BroadcastHandler | None) -> None:
        """Receive realtime broadcasts (a no-op for transports without them)."""

    def set_reconnect_handler(self, handler: Callable[[], None] | None) -> None:
        """Be told when a dropped realtime connection is back (to catch up by pulling)."""

    @property
    def connected(self) -> bool:
        """Whether the last exchange with the gateway succeeded."""
        return True

    @abstractmethod
    def close(self) -> None:
        """Release connections and threads (idempotent)."""


def _value_errors(handler: EventHandler) -> CellErrorHandler:
    """Report each cell a trusted read could not hold as a ``value_error`` event."""

    def report(e: CellError) -> None:
        handler(
            Event(
                "value_error",
                f"{e.table}/{e.row_id!r} column {e.column!r} of delta {e.delta_id} cannot be "
                f"held by this replica and reads null: {e.reason}",
                {
                    "table": e.table,
                    "row_id": e.row_id,
                    "column": e.column,
                    "delta_id": e.delta_id,
                    "error": e.reason,
                },
            )
        )

    return report


def gateway_error(status: int, body: bytes, retry_after: str | None = None) -> LakeSyncError:
    """The typed error for a gateway error reply (docs/protocol.md §5 body
    ``{"error", "code"}``)."""
    try:
        obj = msgspec.json.decode(body)
        code, message = str(obj["code"]), str(obj["error"])
    except (msgspec.DecodeError, KeyError, TypeError):
        code = code_for_status(status)
        message = f"gateway answered HTTP {status}: {body[:200].decode('utf-8', 'replace')}"
    err = error_for_code(code, message, status)
    if isinstance(err, RateLimitedError) and retry_after is not None:
        with contextlib.suppress(ValueError):
            err.retry_after = max(0.0, float(retry_after))
    return err

