"""Prometheus metrics of one gateway app (its own registry, so several apps can share a process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["GatewayMetrics"]

_COUNTERS = (
    ("pushes", "lakesync_push", "Accepted push batches"),
    ("deltas", "lakesync_push_deltas", "Newly stored deltas"),
    ("pulls", "lakesync_pull", "Answered pulls"),
    (
        "ws_dropped",
        "lakesync_ws_dropped",
        "WebSockets closed for being too slow for their broadcasts (close code 4408)",
    ),
)
"""The counters kept per gateway: (what :meth:`GatewayMetrics.count` calls it, name, help)."""
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class GatewayMetrics:
    """Counters and histograms for pushes, pulls, the hot log and WebSocket connections.

    The push/pull counters carry a ``gateway`` label (read back by :meth:`count_of` for
    ``/v1/admin/metrics/{gw}``). With ``by_gateway`` false they live in a registry of their own
    and ``/metrics`` (unauthenticated) shows process totals instead, naming no tenant.
    """

    def __init__(self, by_gateway: bool = True) -> None:
        self.registry = CollectorRegistry()
        self.by_gateway = by_gateway
        r = self.registry
        self._per_gateway = r if by_gateway else CollectorRegistry()
        self._counters = {
            what: Counter(name, doc, ["gateway"], registry=self._per_gateway)
            for what, name, doc in _COUNTERS
        }
        self._totals = (
            {}
            if by_gateway
            else {what: Counter(name, doc, registry=r) for what, name, doc in _COUNTERS}
        )
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

    def count(self, gateway: str, what: str, n: int = 1) -> None:
        """Count ``n`` ``pushes``, ``pulls``, ``deltas`` or ``ws_dropped`` of a gateway (and of
        the process totals when ``/metrics`` shows no gateway labels)."""
        self._counters[what].labels(gateway).inc(n)
        if what in self._totals:
            self._totals[what].inc(n)

    def count_of(self, gateway: str, what: str) -> int:
        """The ``pushes``, ``pulls``, ``deltas`` or ``ws_dropped`` of a gateway since the
        process started."""
        name = next(name for w, name, _ in _COUNTERS if w == what)
        value = self._per_gateway.get_sample_value(f"{name}_total", {"gateway": gateway})
        return 0 if value is None else int(value)

    def errors_of(self, code: str) -> int:
        """Error replies with ``code`` since the process started."""
        value = self.registry.get_sample_value("lakesync_errors_total", {"code": code})
        return 0 if value is None else int(value)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
