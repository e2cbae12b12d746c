"""Hybrid logical clock (docs/protocol.md §2): 48-bit wall milliseconds and a 16-bit counter in
one uint64."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from lakesync.errors import ClockDriftError, ValidationError

__all__ = [
    "HLC",
    "MAX_COUNTER",
    "MAX_CURSOR",
    "MAX_DRIFT_MS",
    "MAX_HLC",
    "MAX_WALL",
    "decode",
    "encode",
    "parse",
    "parse_cursor",
    "wall_clock_ms",
]

MAX_COUNTER = 0xFFFF
MAX_WALL = (1 << 48) - 1
MAX_HLC = (1 << 64) - 1
MAX_CURSOR = (1 << 63) - 1
MAX_DRIFT_MS = 5000


def encode(wall_ms: int, counter: int) -> int:
    """Pack wall milliseconds and a counter into one HLC value."""
    if not 0 <= wall_ms <= MAX_WALL:
        raise ValidationError(f"HLC wall time {wall_ms} is outside 0..2^48-1")
    if not 0 <= counter <= MAX_COUNTER:
        raise ValidationError(f"HLC counter {counter} is outside 0..65535")
    return (wall_ms << 16) | counter


def decode(ts: int) -> tuple[int, int]:
    """Split an HLC value into ``(wall_ms, counter)``."""
    if not 0 <= ts <= MAX_HLC:
        raise ValidationError(f"HLC {ts} is outside the unsigned 64-bit range")
    return ts >> 16, ts & MAX_COUNTER


def parse(value: object, field: str = "hlc") -> int:
    """Read an HLC from the wire: a decimal string (docs/protocol.md §1) or, tolerated, a JSON
    integer."""
    if isinstance(value, bool):
        raise ValidationError(f"{field} must be a decimal string, got a boolean")
    if isinstance(value, int):
        ts = value
    elif isinstance(value, str):
        if not value.isascii() or not value.isdigit() or len(value) > 20:
            raise ValidationError(f"{field} must be a decimal string of digits, got {value!r}")
        ts = int(value)
    else:
        raise ValidationError(f"{field} must be a decimal string, got {type(value).__name__}")
    if not 0 <= ts <= MAX_HLC:
        raise ValidationError(f"{field} {ts} is outside the unsigned 64-bit range")
    return ts


def parse_cursor(value: object, field: str = "since") -> int:
    """Read a pull cursor (``since``): an HLC as :func:`parse` reads it, at most :data:`MAX_CURSOR`.

    Cursors are the gateway's ingest HLCs, which stores keep as signed 64-bit integers; no
    gateway issues one above :data:`MAX_CURSOR` (wall clocks reach it in the year 6429), so a
    larger one is bad input (a 400), not a value to hand to the store.
    """
    ts = parse(value, field)
    if ts > MAX_CURSOR:
        raise ValidationError(f"{field} {ts} is past the largest ingest cursor 2^63-1")
    return ts


def wall_clock_ms() -> int:
    """The physical clock: Unix time in milliseconds."""
    return time.time_ns() // 1_000_000


def _tick(wall: int, counter: int) -> tuple[int, int]:
    """Apply the counter overflow rule: past 65535 the wall advances by one millisecond."""
    if counter > MAX_COUNTER:
        return wall + 1, 0
    return wall, counter


class HLC:
    """A hybrid logical clock with an injectable physical clock; thread-safe.

    ``now()`` stamps a local event, ``recv(remote)`` merges a remote timestamp and raises
    :class:`ClockDriftError` when the remote wall is more than 5 s ahead of the physical clock.
    """

    def __init__(self, physical: Callable[[], int] = wall_clock_ms, last: int = 0) -> None:
        self._physical = physical
        self._wall, self._counter = decode(last)
        self._lock = threading.Lock()

    @property
    def last(self) -> int:
        """The most recent timestamp this clock produced or observed."""
        return encode(self._wall, self._counter)

    def now(self) -> int:
        """A timestamp strictly greater than every earlier one from this clock."""
        with self._lock:
            wall = max(self._physical(), self._wall)
            counter = self._counter + 1 if wall == self._wall else 0
            self._wall, self._counter = _tick(wall, counter)
            return encode(self._wall, self._counter)

    def recv(self, remote: int) -> int:
        """Merge a remote timestamp; the result is greater than both it and every local one."""
        r_wall, r_counter = decode(remote)
        with self._lock:
            physical = self._physical()
            if r_wall - physical > MAX_DRIFT_MS:
                raise ClockDriftError(
                    f"remote clock is {r_wall - physical} ms ahead of this one "
                    f"(at most {MAX_DRIFT_MS} ms allowed); check the sender's system clock"
                )
            local = max(physical, self._wall)
            if r_wall > local:
                wall, counter = r_wall, r_counter + 1
            elif r_wall == local:
                wall, counter = local, max(self._counter, r_counter) + 1
            else:
                wall, counter = local, self._counter + 1
            self._wall, self._counter = _tick(wall, counter)
            return encode(self._wall, self._counter)
