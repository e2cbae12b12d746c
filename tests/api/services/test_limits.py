"""Token buckets with an injected clock."""

from __future__ import annotations

from lakesync.api.services.limits import RateLimiter, TokenBucket


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_bucket_allows_a_burst_then_answers_the_wait() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=2.0, burst=3.0, clock=clock)
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == 0.5
    clock.t = 0.5
    assert bucket.take() == 0.0


def test_limiter_is_per_key_and_off_at_zero() -> None:
    clock = Clock()
    limiter = RateLimiter(rate=1.0, burst=1.0, clock=clock)
    assert limiter.take(("gw", "a")) == 0.0
    assert limiter.take(("gw", "a")) > 0
    assert limiter.take(("gw", "b")) == 0.0
    off = RateLimiter(rate=0.0, burst=0.0)
    assert all(off.take(("gw", "a")) == 0.0 for _ in range(100))
