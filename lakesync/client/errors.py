"""Client-specific errors, all subclasses of the one LakeSync exception tree.

Errors the gateway reports come back as the core types of :mod:`lakesync.errors` (rebuilt from
the protocol error body); the classes here cover what only a client can get wrong: talking to a
closed replica, a missing optional extra, an unreachable gateway, local row conflicts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakesync.errors import (
    AuthError,
    BackpressureError,
    ClockDriftError,
    ConfigError,
    CursorExpiredError,
    ForbiddenError,
    LakeSyncError,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitedError,
    SchemaError,
    ValidationError,
)

if TYPE_CHECKING:
    from lakesync.client._types import SyncReport

__all__ = [
    "AuthError",
    "BackpressureError",
    "ChangesRejectedError",
    "ClientClosedError",
    "ClockDriftError",
    "ConfigError",
    "ConnectionFailedError",
    "CursorExpiredError",
    "ForbiddenError",
    "LakeSyncError",
    "MissingExtraError",
    "NotFoundError",
    "PayloadTooLargeError",
    "RateLimitedError",
    "RowExistsError",
    "RowNotFoundError",
    "SchemaError",
    "SyncFailedError",
    "ValidationError",
]


class ClientClosedError(LakeSyncError):
    """The client was closed; open a new one to keep using the replica."""

    code = "CLIENT_CLOSED"
    status = 400


class MissingExtraError(ConfigError):
    """An optional dependency is not installed; the message names the ``pip install`` extra."""

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(
            f"{module} is not installed; install it with `pip install 'lakesync[{extra}]'` "
            f"(or `pip install {module}`)"
        )
        self.module = module
        self.extra = extra


class ConnectionFailedError(LakeSyncError):
    """The gateway could not be reached (network error, timeout, dropped WebSocket).

    Retryable: the sync loop retries it with backoff; it surfaces only once retries run out.
    """

    code = "UNAVAILABLE"
    status = 503


class SyncFailedError(LakeSyncError):
    """A sync cycle gave up after its retries; ``cause`` is the last error seen."""

    code = "SYNC_FAILED"
    status = 503

    def __init__(self, message: str, cause: LakeSyncError) -> None:
        super().__init__(message)
        self.cause = cause


class RowExistsError(ValidationError):
    """``insert`` of a row id that is already live in the local replica (use ``update``)."""


class RowNotFoundError(NotFoundError):
    """``update`` or ``delete`` of a row id that is not live in the local replica."""


class ChangesRejectedError(LakeSyncError):
    """``sync(raise_on_rejected=True)`` finished, but the gateway refused some local changes
    for good (outside the client's view, against the schema...): they are in the dead letters.
    ``report`` is the sync's :class:`SyncReport` (``report.rejected`` lists them); everything
    else in the sync was done."""

    code = "CHANGES_REJECTED"
    status = 422

    def __init__(self, message: str, report: SyncReport) -> None:
        super().__init__(message)
        self.report = report
