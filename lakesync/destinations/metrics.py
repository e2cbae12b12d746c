"""Prometheus metrics of shipping to destinations (their own registry, as the gateway's).

A fan-out secondary's failures never stop shipping; they are logged and counted here, by the
destination that names the secondary and by the secondary, so an alert can fire on them. The
gateway's ``/metrics`` shows them for its scheduled runs: the pipeline worker (another process)
returns each run's counts (:meth:`DestinationMetrics.secondary_failure_counts`), which the
gateway adds to its own :class:`DestinationMetrics`, registered as a collector in its registry.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

__all__ = ["DestinationMetrics"]

_SECONDARY_FAILURES = "lakesync_destination_secondary_failures"


class DestinationMetrics(Collector):
    """Counters of one shipping process (``lakesync materialise``, the pipeline worker), or of
    the gateway that runs the scheduled pipeline (a collector its registry can include)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._secondary_failures = Counter(
            _SECONDARY_FAILURES,
            "Failed best-effort writes to a fan-out secondary (the primary had them)",
            ["destination", "secondary"],
            registry=self.registry,
        )

    def secondary_failed(self, destination: str, secondary: str, n: int = 1) -> None:
        """Count ``n`` failed writes of ``destination``'s secondary ``secondary``."""
        self._secondary_failures.labels(destination, secondary).inc(n)

    def secondary_failures(self, destination: str, secondary: str) -> int:
        """Failed writes of that secondary since this object was made."""
        value = self.registry.get_sample_value(
            f"{_SECONDARY_FAILURES}_total",
            {"destination": destination, "secondary": secondary},
        )
        return 0 if value is None else int(value)

    def secondary_failure_counts(self) -> dict[tuple[str, str], int]:
        """Every ``(destination, secondary)`` with failed writes, and how many."""
        return {
            (s.labels["destination"], s.labels["secondary"]): int(s.value)
            for family in self.registry.collect()
            for s in family.samples
            if s.name == f"{_SECONDARY_FAILURES}_total" and s.value
        }

    def collect(self) -> Iterator[Metric]:
        """Every metric, for a registry that includes this one (the gateway's)."""
        yield from self.registry.collect()

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
