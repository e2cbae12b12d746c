"""Retry policy: which errors are worth retrying, and exponential backoff with jitter."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from lakesync.client.errors import (
    BackpressureError,
    ClockDriftError,
    ConnectionFailedError,
    LakeSyncError,
    PayloadTooLargeError,
    RateLimitedError,
    SchemaError,
    ValidationError,
)
from lakesync.errors import ForbiddenError

__all__ = ["Backoff", "is_retryable", "rejects_entries"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with "equal jitter": attempt n waits in [d/2, d], d = base·2ⁿ ≤ cap.

    Half the delay is fixed so retries never hammer the gateway; the random half spreads
    clients that failed together.
    """

    base: float = 0.2
    cap: float = 30.0
    max_retries: int = 5

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        d = min(self.cap, self.base * (2 ** min(attempt, 32)))
        return float(d / 2 + rand() * d / 2)


def is_retryable(err: LakeSyncError) -> bool:
    """Transient failures: unreachable gateway, overload, rate limit, clock skew, 5xx."""
    return (
        isinstance(
            err, ConnectionFailedError | BackpressureError | RateLimitedError | ClockDriftError
        )
        or type(err) is LakeSyncError
    )


def rejects_entries(err: LakeSyncError) -> bool:
    """Errors that blame the pushed deltas themselves (bisect, then dead-letter the culprit)."""
    return isinstance(err, ValidationError | SchemaError | ForbiddenError | PayloadTooLargeError)
