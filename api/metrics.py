"""Prometheus metrics of one gateway app (its own registry, so several apps can share a process)."""

from __future__ import annotations

from collections import Counter as _Tally

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["GatewayMetrics"]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class GatewayMetrics:
    """Counters and histograms for pushes, pulls, the hot log and WebSocket connections.

    With ``by_gateway`` the push/pull counters carry a ``gateway`` label; without it they are
    process totals, so ``/metrics`` (unauthenticated) names no tenant.
    """

    def __init__(self, by_gateway: bool = True) -> None:
        self.registry = CollectorRegistry()
        self.by_gateway = by_gateway
        r = self.registry
        labels = ["gateway"] if by_gateway else []
        self.pushes = Counter("lakesync_push", "Accepted push batches", labels, registry=r)
        self.pushed_deltas = Counter(
            "lakesync_push_deltas", "Newly stored deltas", labels, registry=r
        )
        self.pulls = Counter("lakesync_pull", "Answered pulls", labels, registry=r)
        self.errors = Counter("lakesync_errors", "Error replies by code", ["code"], registry=r)
        self.push_seconds = Histogram(
            "lakesync_push_seconds", "Push latency", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.pull_seconds = Histogram(
            "lakesync_pull_seconds", "Pull latency", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.ws_connections = Gauge(
            "lakesync_ws_connections", "Open WebSocket connections", registry=r
        )
        self.hotlog_unflushed = Gauge(
            "lakesync_hotlog_unflushed_bytes",
            "Hot-log bytes not yet in the landing table",
            registry=r,
        )
        self.hotlog_head = Gauge("lakesync_hotlog_head", "Greatest ingest HLC", registry=r)
        # Per-gateway tallies for /v1/admin/metrics/{gw}, kept whatever /metrics shows.
        self.tally: _Tally[tuple[str, str]] = _Tally()
        self._counters = {"pushes": self.pushes, "pulls": self.pulls, "deltas": self.pushed_deltas}

    def count(self, gateway: str, what: str, n: int = 1) -> None:
        """Count ``n`` ``pushes``, ``pulls`` or ``deltas`` of a gateway: its tally and the
        Prometheus counter (labelled by gateway or not, see the class)."""
        self.tally[(gateway, what)] += n
        counter = self._counters[what]
        (counter.labels(gateway) if self.by_gateway else counter).inc(n)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
