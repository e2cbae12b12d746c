"""The web console's last hour (pure): a ring buffer of samples per gateway, taken by the gateway
every few seconds from its counters and its status.

The gateway keeps this history in memory (:mod:`lakesync.api.services.console` samples it), so
the console's charts start empty when the process starts and cover at most :attr:`History.keep_s`
seconds. No I/O here.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping

import msgspec

from lakesync.status import Backlog, GatewayStatus

__all__ = ["Counts", "History", "Point"]


class Counts(msgspec.Struct, frozen=True):
    """A gateway's counters since the process started: push batches, pulls, stored deltas."""

    pushes: int = 0
    pulls: int = 0
    deltas: int = 0


class Point(msgspec.Struct, frozen=True):
    """One sample of a gateway: when (epoch seconds), its counters and their rates per second
    since the previous sample, the lag in seconds of the landing flush, of the pipeline (the age
    of the newest delta its models hold) and of each destination (0: nothing waiting; None: not
    known, such as a destination that cannot be read or a pipeline that never ran), its
    connected clients and failing connectors."""

    at: float
    pushes: int
    pulls: int
    deltas: int
    push_rate: float
    pull_rate: float
    delta_rate: float
    landing_lag_s: float | None
    pipeline_lag_s: float | None
    destination_lag_s: dict[str, float | None]
    clients: int
    connectors_failing: int


def _rate(now: int, before: int, seconds: float) -> float:
    return round(max(0, now - before) / seconds, 3) if seconds > 0 else 0.0


def _lag(backlog: Backlog, known: bool) -> float | None:
    """A backlog's lag in seconds: 0 when nothing waits (a chart draws it from the first
    sample), None when it could not be read."""
    if not known:
        return None
    return backlog.oldest_age_s if backlog.oldest_age_s is not None else 0.0


class History:
    """The samples of each gateway over the last ``keep_s`` seconds, taken every ``every_s``."""

    def __init__(self, keep_s: float = 3600.0, every_s: float = 5.0) -> None:
        self.keep_s = keep_s
        self.every_s = every_s
        self._size = math.ceil(keep_s / every_s) + 1
        self._points: dict[str, deque[Point]] = {}

    def add(self, at: float, counts: Counts, status: GatewayStatus) -> Point:
        """Record a sample of ``status.gateway`` taken at ``at``; returns it."""
        points = self._points.setdefault(status.gateway, deque(maxlen=self._size))
        before = points[-1] if points else None
        seconds = at - before.at if before else 0.0
        point = Point(
            at=at,
            pushes=counts.pushes,
            pulls=counts.pulls,
            deltas=counts.deltas,
            push_rate=_rate(counts.pushes, before.pushes, seconds) if before else 0.0,
            pull_rate=_rate(counts.pulls, before.pulls, seconds) if before else 0.0,
            delta_rate=_rate(counts.deltas, before.deltas, seconds) if before else 0.0,
            landing_lag_s=_lag(status.landing.lag, known=True),
            pipeline_lag_s=status.pipeline.freshness_s,
            destination_lag_s={
                d.name: _lag(d.lag, known=d.error is None) for d in status.destinations
            },
            clients=sum(c.connections for c in status.clients),
            connectors_failing=sum(1 for c in status.connectors if c.failing),
        )
        points.append(point)
        return point

    def series(self) -> Mapping[str, list[Point]]:
        """Every gateway's samples, oldest first."""
        return {gw: list(points) for gw, points in self._points.items()}
