"""Token buckets for per-client and per-connection rate limits (pure; the clock is injected)."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["RateLimiter", "TokenBucket"]


class TokenBucket:
    """``rate`` tokens per second up to ``burst``; :meth:`take` answers the wait before a retry."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic):
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = burst
        self._at = clock()

    def take(self) -> float:
        """Take one token: 0.0 when allowed, else the seconds until one is available."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        return (1 - self._tokens) / self.rate


class RateLimiter:
    """One :class:`TokenBucket` per key (e.g. gateway and client id); disabled when rate <= 0."""

    def __init__(
        self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = max(burst, 1.0)
        self._clock = clock
        self._buckets: dict[tuple[str, str], TokenBucket] = {}

    def take(self, key: tuple[str, str]) -> float:
        """0.0 when the call is allowed, else the seconds to wait (Retry-After)."""
        if self.rate <= 0:
            return 0.0
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) > 100_000:  # bound memory: idle buckets are full anyway
                self._buckets.clear()
            bucket = self._buckets[key] = TokenBucket(self.rate, self.burst, self._clock)
        return bucket.take()
