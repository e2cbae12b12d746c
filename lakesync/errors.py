"""The one exception tree of LakeSync.

Every error that can reach a user carries a protocol error ``code`` and the HTTP ``status`` it maps
to, so the gateway turns any of them into ``{"error": message, "code": code}`` in one place and
the client raises the same types when the gateway answers with them.
"""

from __future__ import annotations

import sys
from typing import ClassVar

__all__ = [
    "AuthError",
    "BackpressureError",
    "ClockDriftError",
    "ConfigError",
    "CursorExpiredError",
    "ForbiddenError",
    "LakeSyncError",
    "NotFoundError",
    "PayloadTooLargeError",
    "RateLimitedError",
    "SchemaError",
    "StoreUnavailableError",
    "UnsupportedMediaTypeError",
    "ValidationError",
    "ValueTypeError",
    "code_for_status",
    "error_for_code",
    "first_line",
    "is_outage_sqlstate",
    "is_store_outage",
]

_OUTAGE_SQLSTATES = ("08", "53", "57", "25P03", "55P03")


def first_line(exc: BaseException) -> str:
    """``exc`` in one log line: its type and the first line of its message (a driver's further
    lines are hints and context)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def is_store_outage(exc: BaseException) -> bool:
    """Whether ``exc``, raised by the PostgreSQL driver (psycopg), says the server cannot serve
    now (unreachable, restarting, overloaded, a timeout, the session ended) rather than that a
    statement is wrong: a 503 to retry. The driver is looked up in ``sys.modules`` so that a
    process that never loaded it does not load it here."""
    psycopg = sys.modules.get("psycopg")
    if psycopg is None or not isinstance(exc, psycopg.Error):
        return False
    return isinstance(
        exc, psycopg.OperationalError | psycopg.InterfaceError
    ) or is_outage_sqlstate(exc.sqlstate)


def is_outage_sqlstate(sqlstate: str | None) -> bool:
    """Whether a PostgreSQL SQLSTATE says the server cannot serve now rather than that a
    statement is wrong: a connection exception (class 08), insufficient resources (53),
    operator intervention (57: a shutdown, a statement timeout), a session ended idle in its
    transaction (25P03), a lock not available in time (55P03)."""
    return (sqlstate or "").startswith(_OUTAGE_SQLSTATES)


class LakeSyncError(Exception):
    """Base of every LakeSync error: a message for humans, an error code and an HTTP status."""

    code: ClassVar[str] = "INTERNAL_ERROR"
    status: ClassVar[int] = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ValidationError(LakeSyncError):
    """Malformed input: wrong shape, wrong type, missing field, out-of-range value."""

    code = "VALIDATION_ERROR"
    status = 400


class PayloadTooLargeError(ValidationError):
    """A request body larger than the gateway accepts."""

    status = 413


class UnsupportedMediaTypeError(ValidationError):
    """A request body of a media type the route does not take."""

    status = 415


class ConfigError(ValidationError):
    """An invalid ``lakesync.yaml`` or environment setting."""


class SchemaError(LakeSyncError):
    """An identifier, column or type that does not match the registered table schema."""

    code = "SCHEMA_ERROR"
    status = 422


class ValueTypeError(SchemaError):
    """A column value that is not its column's declared type in canonical wire form (or a null
    in a column that is not nullable): bad input, so 400, with the schema error code."""

    status = 400


class ClockDriftError(LakeSyncError):
    """A remote HLC too far ahead of the local physical clock (docs/protocol.md §2)."""

    code = "CLOCK_DRIFT"
    status = 409


class AuthError(LakeSyncError):
    """Missing, malformed, expired or forged credentials."""

    code = "AUTH_ERROR"
    status = 401


class ForbiddenError(LakeSyncError):
    """Valid credentials that do not allow this operation."""

    code = "FORBIDDEN"
    status = 403


class NotFoundError(LakeSyncError):
    """The named resource does not exist."""

    code = "NOT_FOUND"
    status = 404


class CursorExpiredError(LakeSyncError):
    """A pull cursor older than the gateway's hot log retains (an extension of docs/protocol.md
    §5: code ``CURSOR_EXPIRED``, HTTP 410): the deltas after it left the hot log, so the client must
    start again from the checkpoint (which covers them) and pull from its position."""

    code = "CURSOR_EXPIRED"
    status = 410


class RateLimitedError(LakeSyncError):
    """Too many requests; retry after ``retry_after`` seconds."""

    code = "RATE_LIMITED"
    status = 429

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class BackpressureError(LakeSyncError):
    """The gateway is shedding load (un-flushed hot log too large, or draining)."""

    code = "BACKPRESSURE_ERROR"
    status = 503


class StoreUnavailableError(BackpressureError):
    """The hot-log store cannot serve now (see :func:`is_store_outage`), raised by a job that
    names what is down; clients are told to retry shortly."""


_GATEWAY_ERRORS: tuple[type[LakeSyncError], ...] = (
    ValidationError,
    PayloadTooLargeError,
    UnsupportedMediaTypeError,
    SchemaError,
    ValueTypeError,
    ClockDriftError,
    AuthError,
    ForbiddenError,
    NotFoundError,
    CursorExpiredError,
    RateLimitedError,
    BackpressureError,
)
"""The errors a gateway answers with; each class's ``code`` and ``status`` are the only map."""

_BY_CODE_AND_STATUS = {(cls.code, cls.status): cls for cls in _GATEWAY_ERRORS}
_BY_CODE: dict[str, type[LakeSyncError]] = {}
_BY_STATUS: dict[int, type[LakeSyncError]] = {}
for _cls in _GATEWAY_ERRORS:  # the first class of a code or status (the base) stands for it
    _BY_CODE.setdefault(_cls.code, _cls)
    _BY_STATUS.setdefault(_cls.status, _cls)


def code_for_status(status: int, default: str = "INTERNAL_ERROR") -> str:
    """The error code of an HTTP error status, for a reply that carries no code of its own (a
    framework's or a proxy's, a WebSocket close code ``4000 + status``); ``default`` if none."""
    cls = _BY_STATUS.get(status)
    return default if cls is None else cls.code


def error_for_code(code: str, message: str, status: int | None = None) -> LakeSyncError:
    """Rebuild the typed error for a protocol error body (used by clients reading gateway replies).

    The class whose code and status both match wins (``VALIDATION_ERROR`` with 413 is a
    :class:`PayloadTooLargeError`); docs/protocol.md §5 also lists ``AUTH_ERROR`` under 403,
    which is a :class:`ForbiddenError`; otherwise the code decides.
    """
    cls = _BY_CODE_AND_STATUS.get((code, status or 0))
    if cls is None and code == AuthError.code and status == ForbiddenError.status:
        cls = ForbiddenError
    return (cls or _BY_CODE.get(code, LakeSyncError))(message)
