"""The one exception tree of LakeSync.

Every error that can reach a user carries a SPEC error ``code`` and the HTTP ``status`` it maps
to, so the gateway turns any of them into ``{"error": message, "code": code}`` in one place and
the client raises the same types when the gateway answers with them.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "AuthError",
    "BackpressureError",
    "ClockDriftError",
    "ConfigError",
    "ForbiddenError",
    "LakeSyncError",
    "NotFoundError",
    "PayloadTooLargeError",
    "RateLimitedError",
    "SchemaError",
    "ValidationError",
    "error_for_code",
]


class LakeSyncError(Exception):
    """Base of every LakeSync error: a message for humans, a SPEC code and an HTTP status."""

    code: ClassVar[str] = "INTERNAL_ERROR"
    status: ClassVar[int] = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_body(self) -> dict[str, str]:
        """The SPEC §5 error body for this error."""
        return {"error": self.message, "code": self.code}


class ValidationError(LakeSyncError):
    """Malformed input: wrong shape, wrong type, missing field, out-of-range value."""

    code = "VALIDATION_ERROR"
    status = 400


class PayloadTooLargeError(ValidationError):
    """A request body larger than the gateway accepts."""

    status = 413


class ConfigError(ValidationError):
    """An invalid ``lakesync.yaml`` or environment setting."""


class SchemaError(LakeSyncError):
    """An identifier, column or type that does not match the registered table schema."""

    code = "SCHEMA_ERROR"
    status = 422


class ClockDriftError(LakeSyncError):
    """A remote HLC too far ahead of the local physical clock (SPEC §2)."""

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


_BY_CODE: dict[str, type[LakeSyncError]] = {
    cls.code: cls
    for cls in (
        ValidationError,
        SchemaError,
        ClockDriftError,
        AuthError,
        ForbiddenError,
        NotFoundError,
        RateLimitedError,
        BackpressureError,
    )
}


def error_for_code(code: str, message: str, status: int | None = None) -> LakeSyncError:
    """Rebuild the typed error for a SPEC error body (used by clients reading gateway replies)."""
    if code == "VALIDATION_ERROR" and status == 413:
        return PayloadTooLargeError(message)
    if code == "AUTH_ERROR" and status == 403:
        return ForbiddenError(message)
    return _BY_CODE.get(code, LakeSyncError)(message)
