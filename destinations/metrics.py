"""Prometheus metrics of shipping to destinations (their own registry, as the gateway's).

A fan-out secondary's failures never stop shipping; they are logged and counted here, by the
destination that names the secondary and by the secondary, so an alert can fire on them.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest

__all__ = ["DestinationMetrics"]


class DestinationMetrics:
    """Counters of one shipping process (``lakesync materialise``, the pipeline worker)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._secondary_failures = Counter(
            "lakesync_destination_secondary_failures",
            "Failed best-effort writes to a fan-out secondary (the primary had them)",
            ["destination", "secondary"],
            registry=self.registry,
        )

    def secondary_failed(self, destination: str, secondary: str) -> None:
        """Count one failed write of ``destination``'s secondary ``secondary``."""
        self._secondary_failures.labels(destination, secondary).inc()

    def secondary_failures(self, destination: str, secondary: str) -> int:
        """Failed writes of that secondary since this object was made."""
        value = self.registry.get_sample_value(
            "lakesync_destination_secondary_failures_total",
            {"destination": destination, "secondary": secondary},
        )
        return 0 if value is None else int(value)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
