"""The one interface every transport implements, and the values it exchanges."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import msgspec

from lakesync.delta import RowDelta
from lakesync.errors import LakeSyncError, RateLimitedError, error_for_code

__all__ = [
    "CODE_BY_STATUS",
    "BroadcastHandler",
    "Checkpoint",
    "PullPage",
    "PushResult",
    "Transport",
    "gateway_error",
]

BroadcastHandler = Callable[[list[RowDelta]], None]


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


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """An initial-sync snapshot: pages of deltas and the server HLC to pull from afterwards."""

    server_hlc: int
    pages: Iterator[list[RowDelta]]


class Transport(ABC):
    """Moves deltas between a client and one gateway.

    Implementations raise :mod:`lakesync.errors` types for gateway errors (rebuilt from the
    SPEC error body), :class:`client.errors.ConnectionFailedError` when the gateway cannot be
    reached, and refresh the token once on a 401 before giving up with ``AuthError``.
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

    def set_broadcast_handler(self, handler: BroadcastHandler | None) -> None:  # noqa: B027
        """Receive realtime broadcasts (a no-op for transports without them)."""

    def set_reconnect_handler(self, handler: Callable[[], None] | None) -> None:  # noqa: B027
        """Be told when a dropped realtime connection is back (to catch up by pulling)."""

    @property
    def connected(self) -> bool:
        """Whether the last exchange with the gateway succeeded."""
        return True

    @abstractmethod
    def close(self) -> None:
        """Release connections and threads (idempotent)."""


def gateway_error(status: int, body: bytes, retry_after: str | None = None) -> LakeSyncError:
    """The typed error for a gateway error reply (SPEC §5 body ``{"error", "code"}``)."""
    try:
        obj = msgspec.json.decode(body)
        code, message = str(obj["code"]), str(obj["error"])
    except (msgspec.DecodeError, KeyError, TypeError):
        code = CODE_BY_STATUS.get(status, "INTERNAL_ERROR")
        message = f"gateway answered HTTP {status}: {body[:200].decode('utf-8', 'replace')}"
    err = error_for_code(code, message, status)
    if isinstance(err, RateLimitedError) and retry_after is not None:
        with contextlib.suppress(ValueError):
            err.retry_after = max(0.0, float(retry_after))
    return err


CODE_BY_STATUS = {
    400: "VALIDATION_ERROR",
    401: "AUTH_ERROR",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    409: "CLOCK_DRIFT",
    413: "VALIDATION_ERROR",
    422: "SCHEMA_ERROR",
    429: "RATE_LIMITED",
    503: "BACKPRESSURE_ERROR",
}
